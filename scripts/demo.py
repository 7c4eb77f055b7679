#!/usr/bin/env python3
"""vlstack demo. First what a user does first: make a model folder (a small random Qwen3-VL
checkpoint with the real Qwen3 tokenizer and chat template) and talk to it with `vlstack run`
(a prompt, piped stdin, a stop string, a second turn that reuses the first turn's KV). Then the
engine underneath: an image prompt through `vlstack forward` (M-RoPE positions from
get_rope_index) with greedy decoding, a continuous batch with a DeepStack request, chunked
prefill, and a compiled BF16 artifact benchmarked through the batch engine.

Usage: demo.py --vlstack PATH --work DIR [--tokens N]
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import numpy as np


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dt = {"int32": "I32", "float32": "F32"}[str(arr.dtype)]
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        dt = {"F32": np.float32, "I32": np.int32}[e["dtype"]]
        out[name] = np.frombuffer(data[b:en], dtype=dt).reshape(e["shape"])
    return out


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def chat(a):
    """`vlstack run` on a model folder the way a user meets it."""
    model = os.path.join(a.work, "chat-qwen3-vl")
    print("[demo] a model folder: random Qwen3-VL weights (hidden 64, 4 layers, the real 151936-token"
          " vocabulary), the Qwen3 tokenizer and the Qwen3-VL chat template")
    run([a.vlstack, "make-test-model", "--out", model, "--vocab", "151936", "--hidden", "64",
         "--layers", "4", "--untied", "--seed", "11"])
    print("\n[demo] ask it something: the reply streams to stdout (random weights: random words),"
          " speed and time to first token go to stderr")
    run([a.vlstack, "run", "--model", model, "--prompt", "Describe a sunrise in one sentence.",
         "--max-tokens", "32", "--temperature", "0.8", "--seed", "1"])
    print("\n[demo] the prompt can come from a pipe; --stop cuts the reply right before a stop string")
    first = subprocess.run([a.vlstack, "run", "--model", model, "--max-tokens", "24"],
                           input="What is a vision-language model?", capture_output=True,
                           text=True, check=True).stdout
    print("[demo] reply:          " + json.dumps(first))
    words = [w for w in first.split() if w.isascii() and w.isalnum()]
    if words:
        stop = words[len(words) // 2]
        print("$ echo 'What is a vision-language model?' | " +
              " ".join([a.vlstack, "run", "--model", model, "--max-tokens", "24", "--stop", stop]))
        cut = subprocess.run([a.vlstack, "run", "--model", model, "--max-tokens", "24", "--stop",
                              stop], input="What is a vision-language model?",
                             capture_output=True, text=True, check=True).stdout
        print(f"[demo] with --stop {json.dumps(stop)}: " + json.dumps(cut))
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--tokens", type=int, default=8)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    chat(a)
    model = os.path.join(a.work, "tiny-qwen3-vl")
    run([a.vlstack, "make-test-model", "--out", model, "--seed", "7", "--untied"])
    cfg = json.load(open(os.path.join(model, "config.json")))
    vs, ve, img = cfg["vision_start_token_id"], cfg["vision_end_token_id"], cfg["image_token_id"]
    # A prompt with one image of grid [1,4,6] (6 merged visual tokens) between text tokens.
    prompt = [11, 12, 13, vs] + [img] * 6 + [ve, 14, 15]
    grid = np.array([[1, 4, 6]], dtype=np.int32)
    rng = np.random.default_rng(0)
    visual = rng.standard_normal((6, cfg["text_config"]["hidden_size"])).astype(np.float32)
    eos = set(json.load(open(os.path.join(model, "generation_config.json")))["eos_token_id"])

    print(f"\n[demo] prompt: {len(prompt)} tokens with one image (grid 1x4x6 -> 6 visual tokens)")
    generated = []
    for step in range(a.tokens):
        inp = os.path.join(a.work, "input.safetensors")
        out = os.path.join(a.work, "output.safetensors")
        tensors = {"input_ids": np.array(prompt, np.int32), "image_grid_thw": grid,
                   "visual_embeds": visual}
        if generated:
            tensors["decode_tokens"] = np.array(generated, np.int32)
        write_safetensors(inp, tensors)
        cmd = [a.vlstack, "forward", "--model", model, "--input", inp, "--output", out]
        if step == 0:
            cmd.append("--diagnostics")
        run(cmd)
        res = read_safetensors(out)
        if step == 0:
            print(f"[demo] prefill logits {res['logits'].shape}, "
                  f"{sum(k.startswith('hidden_after_layer') for k in res)} per-layer hidden states, "
                  f"K cache {res['k_cache.0'].shape}")
        last = res["decode_logits"][-1] if generated else res["logits"][-1]
        tok = int(np.argmax(last))
        generated.append(tok)
        print(f"[demo] step {step}: greedy token {tok} (logit {last[tok]:.4f})")
        if tok in eos:
            print("[demo] end of sequence")
            break
    print(f"\n[demo] generated {len(generated)} tokens: {generated}")

    # The same prompt with DeepStack features, plus two text prompts, through the
    # continuous-batch engine with 2 slots (3 requests: one waits for a free slot).
    pad_positions = np.array([i for i, t in enumerate(prompt) if t == img], np.int32)
    k = len(cfg["vision_config"]["deepstack_visual_indexes"])
    feats = rng.standard_normal((k, len(pad_positions), visual.shape[1])).astype(np.float32)
    write_safetensors(os.path.join(a.work, "req_ds.safetensors"),
                      {"input_ids": np.array(prompt, np.int32), "image_grid_thw": grid,
                       "visual_embeds": visual, "deepstack_positions": pad_positions,
                       "deepstack_features": feats})
    write_safetensors(os.path.join(a.work, "req_text1.safetensors"),
                      {"input_ids": np.array([21, 22, 23], np.int32)})
    write_safetensors(os.path.join(a.work, "req_text2.safetensors"),
                      {"input_ids": np.array([31, 32, 33, 34, 35], np.int32)})
    reqs = [{"id": "deepstack-image", "input": "req_ds.safetensors", "max_new_tokens": 6},
            {"id": "text-1", "input": "req_text1.safetensors", "max_new_tokens": 4},
            {"id": "text-2", "input": "req_text2.safetensors", "max_new_tokens": 5,
             "cancel_after_tokens": 2}]
    jsonl = os.path.join(a.work, "requests.jsonl")
    with open(jsonl, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in reqs))
    print("\n[demo] continuous batch: 3 requests (DeepStack image, text, text cancelled after 2 tokens), 2 slots")
    print("$ " + " ".join([a.vlstack, "batch", "--model", model, "--requests", jsonl, "--slots", "2"]), flush=True)
    out = subprocess.run([a.vlstack, "batch", "--model", model, "--requests", jsonl, "--slots", "2"],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        print("[demo] " + line)

    # Prepared weights: compile once into an artifact, then benchmark from it in BF16.
    art = os.path.join(a.work, "model.bf16.vlsp")
    print("\n[demo] compile the weights once (BF16, stacked QKV and gate/up) and benchmark from the artifact")
    run([a.vlstack, "compile", "--model", model, "--out", art, "--precision", "bf16",
         "--capacity", "48"])
    run([a.vlstack, "bench", "--model", model, "--artifact", art, "--precision", "bf16",
         "--prompt-tokens", "32", "--gen-tokens", "16", "--capacity", "48", "--reps", "3"])
    print("[demo] done: forward with M-RoPE image positions, visual embeddings, diagnostics, "
          "greedy decoding, a DeepStack request in the batch engine, and a compiled "
          "BF16 artifact ran end to end")


if __name__ == "__main__":
    sys.exit(main())
