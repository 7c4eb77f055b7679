#!/usr/bin/env python3
"""Writes a vlstack test checkpoint (Hugging Face layout) as a llama.cpp GGUF, for the anchor
benchmarks (bench/anchors/run.sh): the same weights, run by llama.cpp and ik_llama.cpp.

    PYTHONPATH=LLAMA_SRC/gguf-py python3 hf_to_gguf.py MODEL_DIR OUT.gguf [--type f32|bf16]

Why not llama.cpp's convert_hf_to_gguf.py: it needs `transformers` (for the tokenizer), which
Debian does not package; this script needs only NumPy and llama.cpp's own `gguf` Python package
(gguf-py in its source tree), and reads the checkpoint's tokenizer.json itself.

The text decoder is written as llama.cpp's `qwen3` architecture, or `qwen3moe` for the
mixture-of-experts models (qwen3_moe and qwen3_vl_moe, ADR 0027): the router becomes
`blk.N.ffn_gate_inp`, the experts are stacked into `blk.N.ffn_{gate,up,down}_exps` ([E, I_e, H],
[E, I_e, H], [E, H, I_e] in NumPy order) from either checkpoint layout (per expert, or
Qwen3-VL-MoE's fused `gate_up_proj` [E, H, 2·I_e] and `down_proj` [E, I_e, H], transposed here).
llama.cpp's qwen3moe has every layer sparse and always renormalises the top-k weights, so a
checkpoint with dense layers (decoder_sparse_step > 1, mlp_only_layers) or norm_topk_prob false
is refused. For Qwen3-VL checkpoints that
is exact for text: with no image, M-RoPE's three position axes are equal and its rotation is
1-D RoPE (docs/contracts.md §B.1), so only `model.language_model.*` and `lm_head` are kept (the
vision tower and DeepStack need no GGUF for text benchmarks). Tensors keep the checkpoint's values:
BF16 weights become F32 exactly, or stay BF16 bit for bit; norms are F32 as llama.cpp wants.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("hf_to_gguf.py: cannot import `gguf`: set PYTHONPATH to a llama.cpp tree's gguf-py")


def read_safetensors(path):
    """Yields (name, float32 array) for every tensor of one .safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            b, e = info["data_offsets"]
            f.seek(base + b)
            raw = f.read(e - b)
            dt = info["dtype"]
            if dt == "BF16":
                a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
            elif dt == "F16":
                a = np.frombuffer(raw, np.float16).astype(np.float32)
            elif dt == "F32":
                a = np.frombuffer(raw, np.float32)
            else:
                sys.exit(f"hf_to_gguf.py: {name}: dtype {dt} not supported (FP8 checkpoints: "
                         "convert a dequantized copy)")
            yield name, a.reshape(info["shape"])


def checkpoint_tensors(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for f in files:
        yield from read_safetensors(os.path.join(model_dir, f))


GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


MOE_NAMES = {
    "mlp.gate.weight": "ffn_gate_inp.weight",
}


def gguf_name(hf):
    """The GGUF name of a text-decoder tensor, or None for tensors the text model lacks (and
    for expert tensors, which moe_tensors() stacks)."""
    for prefix in ("model.language_model.", "model."):
        if hf.startswith(prefix):
            rest = hf[len(prefix):]
            break
    else:
        return "output.weight" if hf == "lm_head.weight" else None
    if rest == "embed_tokens.weight":
        return "token_embd.weight"
    if rest == "norm.weight":
        return "output_norm.weight"
    if rest.startswith("layers."):
        _, layer, sub = rest.split(".", 2)
        if sub in GGUF_NAMES:
            return f"blk.{layer}.{GGUF_NAMES[sub]}"
        if sub in MOE_NAMES:
            return f"blk.{layer}.{MOE_NAMES[sub]}"
    return None  # the vision tower (model.visual.*), experts and anything else


def expert_part(hf):
    """(layer, key, expert) for an expert tensor: key "gate_up"/"down" (fused, expert None) or
    "gate"/"up"/"down" (per expert); None otherwise."""
    for prefix in ("model.language_model.", "model."):
        if hf.startswith(prefix + "layers."):
            rest = hf[len(prefix) + len("layers."):]
            break
    else:
        return None
    layer, sub = rest.split(".", 1)
    if sub == "mlp.experts.gate_up_proj":
        return int(layer), "gate_up", None
    if sub == "mlp.experts.down_proj":
        return int(layer), "down", None
    if sub.startswith("mlp.experts.") and sub.endswith("_proj.weight"):
        _, _, e, proj = sub.split(".", 3)
        return int(layer), proj[: -len("_proj.weight")], int(e)
    return None


class ExpertStacker:
    """Collects a layer's expert tensors and yields the three stacked GGUF tensors once the
    layer is complete (a layer's experts only are held, not the model's)."""

    def __init__(self, experts, inter):
        self.E, self.I = experts, inter
        self.parts = {}

    def add(self, hf, a):
        layer, key, e = expert_part(hf)
        d = self.parts.setdefault(layer, {})
        if e is None:  # fused: gate_up [E, H, 2I], down [E, I, H]
            if key == "gate_up":
                d["gate"] = np.ascontiguousarray(a[:, :, : self.I].transpose(0, 2, 1))
                d["up"] = np.ascontiguousarray(a[:, :, self.I:].transpose(0, 2, 1))
            else:
                d["down"] = np.ascontiguousarray(a.transpose(0, 2, 1))
        else:
            d.setdefault(key, [None] * self.E)[e] = a
        done = all(isinstance(d.get(k), np.ndarray) or
                   (isinstance(d.get(k), list) and all(x is not None for x in d[k]))
                   for k in ("gate", "up", "down"))
        if not done:
            return []
        del self.parts[layer]
        out = []
        for k in ("gate", "up", "down"):
            t = d[k] if isinstance(d[k], np.ndarray) else np.stack(d[k])
            out.append((f"blk.{layer}.ffn_{k}_exps.weight", t))
        return out

    def check_done(self):
        if self.parts:
            sys.exit(f"hf_to_gguf.py: incomplete experts in layers {sorted(self.parts)}")


def add_vocab(w, model_dir, cfg, vocab_size):
    tok = json.load(open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8"))
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [gguf.TokenType.UNUSED] * vocab_size
    for t, i in tok["model"]["vocab"].items():
        tokens[i], types[i] = t, gguf.TokenType.NORMAL
    for a in tok.get("added_tokens", []):
        i = a["id"]
        tokens[i] = a["content"]
        types[i] = gguf.TokenType.CONTROL if a.get("special") else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_add_bos_token(False)
    for key, setter in (("eos_token_id", w.add_eos_token_id), ("bos_token_id", w.add_bos_token_id),
                        ("pad_token_id", w.add_pad_token_id)):
        if isinstance(cfg.get(key), int):
            setter(cfg[key])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f32", "bf16"], default="f32",
                    help="type of the 2-D weights (norms are always F32)")
    args = ap.parse_args()
    full = json.load(open(os.path.join(args.model_dir, "config.json")))
    cfg = full.get("text_config", full)
    if "quantization_config" in full:
        sys.exit("hf_to_gguf.py: quantized (FP8) checkpoints are not converted")
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim", H // heads)
    V = cfg["vocab_size"]
    rope = cfg.get("rope_theta") or (cfg.get("rope_scaling") or {}).get("rope_theta", 1e6)

    moe = full.get("model_type") in ("qwen3_moe", "qwen3_vl_moe")
    if moe:
        if cfg.get("decoder_sparse_step", 1) != 1 or cfg.get("mlp_only_layers"):
            sys.exit("hf_to_gguf.py: llama.cpp's qwen3moe has no dense layers: "
                     "decoder_sparse_step must be 1 and mlp_only_layers empty")
        if not cfg.get("norm_topk_prob", True):
            sys.exit("hf_to_gguf.py: llama.cpp's qwen3moe always renormalises the top-k "
                     "weights: norm_topk_prob false is not representable")
        stacker = ExpertStacker(cfg["num_experts"], cfg["moe_intermediate_size"])

    w = gguf.GGUFWriter(args.out, "qwen3moe" if moe else "qwen3")
    w.add_name(os.path.basename(os.path.normpath(args.model_dir)))
    w.add_context_length(cfg.get("max_position_embeddings", 40960))
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    if moe:
        w.add_expert_count(cfg["num_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_rope_freq_base(float(rope))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if args.type == "f32"
                    else gguf.LlamaFileType.MOSTLY_BF16)
    add_vocab(w, args.model_dir, full, V)

    def add(name, a):
        if a.ndim >= 2 and args.type == "bf16" and not name.endswith("ffn_gate_inp.weight"):
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.BF16)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:  # the router stays F32, as llama.cpp's converter keeps it
            w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))

    seen = 0
    for hf, a in checkpoint_tensors(args.model_dir):
        if moe and expert_part(hf) is not None:
            for name, t in stacker.add(hf, a):
                seen += 1
                add(name, t)
            continue
        name = gguf_name(hf)
        if name is None:
            continue
        seen += 1
        add(name, a)
    if moe:
        stacker.check_done()
    # Per layer: 2 norms, q/k/v/o, q/k norms, then gate/up/down or router + 3 stacked experts.
    expected = 2 + (12 if moe else 11) * L + (
        0 if cfg.get("tie_word_embeddings", full.get("tie_word_embeddings")) else 1)
    if seen != expected:
        sys.exit(f"hf_to_gguf.py: found {seen} text tensors, expected {expected}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"hf_to_gguf.py: wrote {args.out} ({seen} tensors, {args.type})", file=sys.stderr)


if __name__ == "__main__":
    main()
