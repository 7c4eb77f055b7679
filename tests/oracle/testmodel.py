"""Builds small random Qwen3 / Qwen3-VL checkpoints with st.py (oracle self-tests only).

Mirrors the documented layout of `vlstack make-test-model`, so the oracle and the
driver can be exercised before/without the engine. Not used to check the engine, except
by the run_cases.py `own_*` cases, which feed checkpoints written here to the engine's loader.

Mixture of experts (`arch` qwen3-moe / qwen3-vl-moe): the Hugging Face layouts, per expert
(Qwen3-MoE: `mlp.experts.{e}.{gate,up,down}_proj.weight`) or fused (Qwen3-VL-MoE:
`mlp.experts.gate_up_proj` [E, H, 2·I_e], gate columns first, and `mlp.experts.down_proj`
[E, I_e, H]), with the router `mlp.gate.weight` [E, H] in both.
"""

import json
import os

import numpy as np

import st


def moe_keys(experts=8, top_k=2, moe_intermediate=32, sparse_step=1, mlp_only_layers=(),
             norm_topk=True):
    """The MoE keys of a qwen3_moe config / a qwen3_vl_moe text_config."""
    return {"num_experts": experts, "num_experts_per_tok": top_k,
            "moe_intermediate_size": moe_intermediate, "decoder_sparse_step": sparse_step,
            "mlp_only_layers": list(mlp_only_layers), "norm_topk_prob": norm_topk}


def make_config(arch="qwen3-vl", hidden=64, layers=3, heads=4, kv_heads=2, head_dim=16,
                intermediate=128, vocab=512, tied=True, mrope_section=None,
                mrope_layout="interleaved", rope_theta=5e6, deepstack=3, moe=None):
    """moe: moe_keys(...) for arch qwen3-moe / qwen3-vl-moe (defaults when None)."""
    if arch in ("qwen3-moe", "qwen3-vl-moe"):
        cfg = make_config(arch[:-4], hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, tied,
                          mrope_section, mrope_layout, rope_theta, deepstack)
        keys = moe if moe is not None else moe_keys()
        if arch == "qwen3-moe":
            cfg.update(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], **keys)
        else:
            cfg.update(model_type="qwen3_vl_moe", architectures=["Qwen3VLMoeForConditionalGeneration"])
            cfg["text_config"].update(keys)
        return cfg
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


def is_sparse(tc, l):
    """transformers' Qwen3MoeDecoderLayer rule (written out again here, not taken from moe_ref)."""
    E = tc.get("num_experts", 0)
    return (l not in (tc.get("mlp_only_layers") or [])) and E > 0 and (l + 1) % tc.get("decoder_sparse_step", 1) == 0


def fused_experts(gate, up, down):
    """Per-expert Linear weights gate/up [E][I, H], down [E][H, I] -> the Qwen3-VL-MoE tensors
    gate_up_proj [E, H, 2·I] (x @ gate_up_proj[e] = [x @ gate.T | x @ up.T]) and
    down_proj [E, I, H] (act @ down_proj[e] = act @ down.T)."""
    E, I, H = len(gate), gate[0].shape[0], gate[0].shape[1]
    gu = np.empty((E, H, 2 * I), np.float32)
    dn = np.empty((E, I, H), np.float32)
    for e in range(E):
        for i in range(I):
            gu[e, :, i] = gate[e][i, :]
            gu[e, :, I + i] = up[e][i, :]
            dn[e, i, :] = down[e][:, i]
    return gu, dn


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
        if cfg.get("model_type") in ("qwen3_moe", "qwen3_vl_moe") and is_sparse(tc, i):
            E, Ie = tc["num_experts"], tc["moe_intermediate_size"]
            w[q + "mlp.gate.weight"] = mat(E, H)   # logits ~ N(0, 1) on unit-RMS rows
            gate = [mat(Ie, H) for _ in range(E)]
            up = [mat(Ie, H) for _ in range(E)]
            down = [mat(H, Ie) for _ in range(E)]
            if cfg["model_type"] == "qwen3_moe":
                for e in range(E):
                    w[f"{q}mlp.experts.{e}.gate_proj.weight"] = gate[e]
                    w[f"{q}mlp.experts.{e}.up_proj.weight"] = up[e]
                    w[f"{q}mlp.experts.{e}.down_proj.weight"] = down[e]
            else:
                w[q + "mlp.experts.gate_up_proj"], w[q + "mlp.experts.down_proj"] = fused_experts(gate, up, down)
            continue
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
