#!/usr/bin/env python3
"""vlstack demo. First what a user does first: make a model folder (a small random Qwen3-VL
checkpoint with its vision tower, the real Qwen3 tokenizer and chat template), serve it with
`vlstack serve` and talk to it with the official OpenAI client (a streamed question about a
picture, usage, a stop string, the metrics), then stop the server with SIGTERM. Then the same
model from the command line with `vlstack run`: a question about a picture, a prompt, piped
stdin, a stop string. Then the engine
underneath: the picture through the vision tower (`vlstack vision`), an image prompt through
`vlstack forward --image` (pads expanded, M-RoPE positions from get_rope_index, DeepStack entry)
with greedy decoding, a continuous batch with an image request, and a compiled BF16 artifact
benchmarked through the batch engine.

Usage: demo.py --vlstack PATH --work DIR [--tokens N]
"""
import argparse
import json
import os
import struct
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def picture(path, w=120, h=80):
    """A small sunrise: a sky gradient, a sun and the sea (PNG)."""
    from PIL import Image, ImageDraw
    img = Image.new("RGB", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            px[x, y] = (255, 120 + y, 60 + 2 * y) if y < h * 2 // 3 else (20, 60, 120 + y % 7 * 9)
    ImageDraw.Draw(img).ellipse((w // 2 - 14, h * 2 // 3 - 14, w // 2 + 14, h * 2 // 3 + 14),
                                fill=(255, 230, 80))
    img.save(path)
    return path


def serve(a, model, sunrise):
    """`vlstack serve` and the OpenAI client, the way an application meets vlstack."""
    cmd = [a.vlstack, "serve", "--model", model, "--port", "0", "--slots", "2",
           "--capacity", "2048"]
    print("\n[demo] serve the model: an OpenAI-compatible server (chat page at /, /v1/chat/completions,"
          " /metrics); one JSON log line per request on its stderr")
    print("$ " + " ".join(cmd), flush=True)
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, bufsize=1)
    url = None
    deadline = time.time() + 120
    while url is None and time.time() < deadline:
        line = server.stderr.readline()
        if not line:
            break
        print("  [server] " + line.rstrip())
        if "listening on " in line:
            url = line.split("listening on ")[1].split()[0]
    if url is None:
        server.kill()
        sys.exit("[demo] the server did not start")
    # /health answers 503 while the model loads, then 200.
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.1)
    logs = []
    threading.Thread(target=lambda: [logs.append(l) for l in server.stderr], daemon=True).start()
    client = ["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo_client.mjs"),
              "--url", url, "--image", sunrise]
    print("$ " + " ".join(client), flush=True)
    rc = subprocess.run(client).returncode
    print("[demo] the server's request log:")
    for line in logs:
        print("  [server] " + line.rstrip())
    print("[demo] SIGTERM: the server stops taking requests, finishes those in flight and exits 0")
    server.send_signal(signal.SIGTERM)
    code = server.wait(timeout=60)
    time.sleep(0.2)
    for line in logs[-2:]:
        print("  [server] " + line.rstrip())
    print(f"[demo] server exit code {code}")
    if rc != 0 or code != 0:
        sys.exit(f"[demo] the client exited {rc}, the server {code}")


def chat(a):
    """`vlstack serve` and `vlstack run` on a model folder the way a user meets them."""
    model = os.path.join(a.work, "chat-qwen3-vl")
    print("[demo] a model folder: random Qwen3-VL weights (hidden 64, 4 layers, the real 151936-token"
          " vocabulary, a small vision tower), the Qwen3 tokenizer, the Qwen3-VL chat template and"
          " preprocessor_config.json")
    run([a.vlstack, "make-test-model", "--out", model, "--vocab", "151936", "--hidden", "64",
         "--layers", "4", "--untied", "--seed", "11"])
    sunrise = picture(os.path.join(a.work, "sunrise.png"))
    serve(a, model, sunrise)
    print("\n[demo] the same model from the command line")
    print("\n[demo] ask about a picture: the image is decoded, resized as the model's processor says,"
          " encoded by the vision tower and placed in the prompt (with its DeepStack features);"
          " the reply streams to stdout (random weights: random words)")
    run([a.vlstack, "run", "--model", model, "--image", sunrise, "--prompt",
         "What is in this picture?", "--max-tokens", "24", "--temperature", "0.8", "--seed", "1"])
    print("\n[demo] ask it something without a picture: speed and time to first token go to stderr")
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
    print("\n[demo] the same model from Python: python/vlstack over libvlstack.so (the C ABI), "
          "python/examples/chat.py")
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(a.vlstack))))
    env = dict(os.environ, VLSTACK_LIBRARY=os.path.join(build, "src/capi/libvlstack.so.1"))
    example = os.path.join(REPO, "python/examples/chat.py")
    print(f"$ VLSTACK_LIBRARY={env['VLSTACK_LIBRARY']} python3 {example} --model {model} "
          "--prompt 'What is DeepStack?' --max-tokens 16", flush=True)
    subprocess.run(["/usr/bin/python3", example, "--model", model, "--prompt", "What is DeepStack?",
                    "--max-tokens", "16"], env=env, check=True)
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--tokens", type=int, default=8)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    run([a.vlstack, "--version"])
    chat(a)
    model = os.path.join(a.work, "tiny-qwen3-vl")
    run([a.vlstack, "make-test-model", "--out", model, "--seed", "7", "--untied"])
    cfg = json.load(open(os.path.join(model, "config.json")))
    vs, ve, img = cfg["vision_start_token_id"], cfg["vision_end_token_id"], cfg["image_token_id"]
    sunrise = os.path.join(a.work, "sunrise.png")

    print("\n[demo] the picture through the vision tower: patches, merged rows, DeepStack features")
    vis = os.path.join(a.work, "vision.safetensors")
    run([a.vlstack, "vision", "--model", model, "--image", sunrise, "--output", vis])
    v = read_safetensors(vis)
    print(f"[demo] pixel_values {v['pixel_values'].shape}, grid {v['image_grid_thw'].tolist()}, "
          f"visual_embeds {v['visual_embeds'].shape}, deepstack_features "
          f"{v['deepstack_features'].shape}")

    # A prompt with one image pad between text tokens: forward --image expands it.
    prompt = [11, 12, 13, vs, img, ve, 14, 15]
    inp = os.path.join(a.work, "input.safetensors")
    out = os.path.join(a.work, "output.safetensors")
    write_safetensors(inp, {"input_ids": np.array(prompt, np.int32)})
    print(f"\n[demo] forward --image: the pad expanded to the image's tokens, positions from "
          f"get_rope_index, the DeepStack entry, then {a.tokens} greedy tokens")
    run([a.vlstack, "forward", "--model", model, "--input", inp, "--image", sunrise, "--output",
         out, "--generate", str(a.tokens), "--diagnostics"])
    res = read_safetensors(out)
    print(f"[demo] expanded prompt {len(res['input_ids'])} tokens, grid "
          f"{res['image_grid_thw'].tolist()}, rope_delta {int(res['rope_delta'][0])}, "
          f"{sum(k.startswith('hidden_after_layer') for k in res)} per-layer hidden states, "
          f"generated {res['generated_tokens'].tolist()}")

    # The same image prompt plus two text prompts through the continuous-batch engine with
    # 2 slots (3 requests: one waits for a free slot).
    write_safetensors(os.path.join(a.work, "req_text1.safetensors"),
                      {"input_ids": np.array([21, 22, 23], np.int32)})
    write_safetensors(os.path.join(a.work, "req_text2.safetensors"),
                      {"input_ids": np.array([31, 32, 33, 34, 35], np.int32)})
    reqs = [{"id": "image", "input": "input.safetensors", "images": ["sunrise.png"],
             "max_new_tokens": 6},
            {"id": "text-1", "input": "req_text1.safetensors", "max_new_tokens": 4},
            {"id": "text-2", "input": "req_text2.safetensors", "max_new_tokens": 5,
             "cancel_after_tokens": 2}]
    jsonl = os.path.join(a.work, "requests.jsonl")
    with open(jsonl, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in reqs))
    print("\n[demo] continuous batch: 3 requests (an image, text, text cancelled after 2 tokens), 2 slots")
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
    print("[demo] done: a question about a picture, the vision tower, an image prompt through the "
          "DeepStack entry with greedy decoding, an image request in the batch engine, and a "
          "compiled BF16 artifact ran end to end")


if __name__ == "__main__":
    sys.exit(main())
