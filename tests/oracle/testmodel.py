"""Builds small random Qwen3 / Qwen3-VL checkpoints with st.py (oracle self-tests only).

Mirrors the documented layout of `vlstack make-test-model`, so the oracle and the
driver can be exercised before/without the engine. Not used to check the engine.
"""

import json
import os

import numpy as np

import st


def make_config(arch="qwen3-vl", hidden=64, layers=3, heads=4, kv_heads=2, head_dim=16,
                intermediate=128, vocab=512, tied=True, mrope_section=None,
                mrope_layout="interleaved", rope_theta=5e6, deepstack=3):
    if arch == "qwen3":
        return {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
                "hidden_size": hidden, "num_hidden_layers": layers,
                "num_attention_heads": heads, "num_key_value_heads": kv_heads,
                "head_dim": head_dim, "intermediate_size": intermediate, "vocab_size": vocab,
                "rms_norm_eps": 1e-6, "rope_theta": rope_theta, "hidden_act": "silu",
                "tie_word_embeddings": tied}
    half = head_dim // 2
    if mrope_section is None:
        h = half * 5 // 16
        mrope_section = [half - 2 * h, h, h]
    rs = {"rope_type": "default", "mrope_section": list(mrope_section),
          "mrope_interleaved": mrope_layout == "interleaved"}
    tc = {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
          "num_key_value_heads": kv_heads, "head_dim": head_dim,
          "intermediate_size": intermediate, "vocab_size": vocab, "rms_norm_eps": 1e-6,
          "rope_theta": rope_theta, "rope_scaling": rs, "hidden_act": "silu",
          "tie_word_embeddings": tied}
    cfg = {"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"],
           "text_config": tc, "tie_word_embeddings": tied,
           "vision_start_token_id": vocab - 6, "vision_end_token_id": vocab - 5,
           "image_token_id": vocab - 4, "video_token_id": vocab - 3,
           "vision_config": {"spatial_merge_size": 2, "out_hidden_size": hidden,
                             "deepstack_visual_indexes": list(range(1, 2 * deepstack, 2))}}
    if deepstack == 0:
        del cfg["vision_config"]["deepstack_visual_indexes"]
    return cfg


def random_weights(cfg, seed=0, zero=False):
    rng = np.random.default_rng(seed)
    tc = cfg.get("text_config", cfg)
    H, L = tc["hidden_size"], tc["num_hidden_layers"]
    nh, nkv, D = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    I, V = tc["intermediate_size"], tc["vocab_size"]
    p = "model.language_model." if "text_config" in cfg else "model."

    def mat(o, i):
        if zero:
            return np.zeros((o, i), np.float32)
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def norm(n):
        if zero:
            return np.ones(n, np.float32)
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {p + "embed_tokens.weight": np.ones((V, H), np.float32) if zero
         else rng.standard_normal((V, H)).astype(np.float32)}
    for i in range(L):
        q = f"{p}layers.{i}."
        w[q + "input_layernorm.weight"] = norm(H)
        w[q + "post_attention_layernorm.weight"] = norm(H)
        w[q + "self_attn.q_proj.weight"] = mat(nh * D, H)
        w[q + "self_attn.k_proj.weight"] = mat(nkv * D, H)
        w[q + "self_attn.v_proj.weight"] = mat(nkv * D, H)
        w[q + "self_attn.o_proj.weight"] = mat(H, nh * D)
        w[q + "self_attn.q_norm.weight"] = norm(D)
        w[q + "self_attn.k_norm.weight"] = norm(D)
        w[q + "mlp.gate_proj.weight"] = mat(I, H)
        w[q + "mlp.up_proj.weight"] = mat(I, H)
        w[q + "mlp.down_proj.weight"] = mat(H, I)
    w[p + "norm.weight"] = norm(H)
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = mat(V, H)
    return w


def write_model(out, cfg, weights, dtype="bf16", shards=1):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    dn = {"bf16": "BF16", "f16": "F16", "f32": "F32"}[dtype]
    st.save_checkpoint(weights, out, {n: dn for n in weights}, shards=shards)
