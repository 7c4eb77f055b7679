#!/usr/bin/env python3
"""FP8 checkpoints end to end through the command line (docs/adr/0017-fp8-checkpoints.md):

  * `make-test-model --fp8` writes Qwen's FP8 layout (F8_E4M3 weights, BF16 weight_scale_inv
    per block, quantization_config); edge blocks are exercised with --fp8-block 48,40;
  * tests/oracle/fp8_oracle.py dequantizes it independently (NumPy, the OCP E4M3 formula) into an
    F32 and a BF16 checkpoint;
  * `vlstack forward` gives bit-identical logits for the FP8 checkpoint and its F32 copy at
    --precision f32, bf16 and int8, and for the BF16 copy at bf16, with a text prompt and with an
    image (the vision tower quantized too);
  * an artifact compiled from the FP8 checkpoint is refused for its dequantized copies and the
    other way round, and maps back for the FP8 checkpoint itself;
  * a NaN code, an unknown quant_method and FP8 tensors under a config without
    quantization_config are refused naming the tensor or the key.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "oracle"))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

import fp8_oracle  # noqa: E402
import st  # noqa: E402

VL = ["--hidden", "96", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "24",
      "--intermediate", "200", "--deepstack", "1", "--untied", "--seed", "7",
      "--fp8", "--fp8-vision", "--fp8-block", "48,40"]
TEXT = ["--arch", "qwen3", "--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
        "--head-dim", "16", "--intermediate", "128", "--seed", "8", "--fp8"]


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr}")
    return p


def refused(cmd, needles):
    p = run(cmd, ok=False)
    assert p.returncode != 0 and all(n in p.stderr for n in needles), \
        f"{' '.join(cmd)}: exit {p.returncode}, stderr {p.stderr!r}; wanted {needles}"


def forward(vls, model, inp, out, precision, extra=()):
    run([vls, "forward", "--model", model, "--input", inp, "--output", out,
         "--precision", precision, *extra])
    return st.load_file(out)["logits"]


def same_bits(a, b, what):
    assert a.dtype == np.float32 and a.shape == b.shape, what
    assert a.tobytes() == b.tobytes(), f"{what}: logits differ (max |d| {np.abs(a - b).max()})"


def picture(path):
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, size=(64, 96, 3)).astype(np.uint8), "RGB").save(path)
    return path


def check_layout(model, block):
    """The checkpoint is Qwen's layout: F8_E4M3 Linears with BF16 [ceil/bh, ceil/bw] scales."""
    cfg = json.load(open(f"{model}/config.json"))
    q = cfg["quantization_config"]
    assert q["quant_method"] == "fp8" and q["fmt"] == "e4m3" and q["activation_scheme"] == "dynamic"
    assert q["weight_block_size"] == list(block), q
    header, _ = st.read_header(f"{model}/model.safetensors")
    fp8 = [n for n, v in header.items() if n != "__metadata__" and v["dtype"] == "F8_E4M3"]
    assert fp8, "no F8_E4M3 tensor"
    for name in fp8:
        s = header[name + "_scale_inv"]
        r, c = header[name]["shape"]
        assert s["dtype"] == "BF16" and s["shape"] == [-(-r // block[0]), -(-c // block[1])], name
        assert name.endswith("_proj.weight") or ".visual." in name, name
    for name in ("embed_tokens.weight", "norm.weight", "lm_head.weight"):
        hits = [n for n in header if n.endswith(name) and "visual" not in n]
        assert all(header[n]["dtype"] == "BF16" for n in hits), hits
    return len(fp8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    vls = ap.parse_args().vlstack
    with tempfile.TemporaryDirectory() as work:
        # A Qwen3-VL with its vision tower in FP8, and a plain Qwen3 (tied) in FP8.
        vl, text = f"{work}/vl", f"{work}/text"
        run([vls, "make-test-model", "--out", vl] + VL)
        run([vls, "make-test-model", "--out", text] + TEXT)
        n_vl, n_text = check_layout(vl, (48, 40)), check_layout(text, (128, 128))
        assert n_vl == 2 * 7 + 2 * 4 + 2 * 2, n_vl  # layers, vision blocks, two mergers
        assert n_text == 2 * 7, n_text
        refs = {}
        for name, model in (("vl", vl), ("text", text)):
            for dt in ("f32", "bf16"):
                refs[name, dt] = f"{work}/{name}_{dt}"
                fp8_oracle.dequant_checkpoint(model, refs[name, dt], dt)

        cfg = json.load(open(f"{vl}/config.json"))
        pad, vs, ve = cfg["image_token_id"], cfg["vision_start_token_id"], cfg["vision_end_token_id"]
        text_in, image_in = f"{work}/text.safetensors", f"{work}/image.safetensors"
        st.save_file({"input_ids": np.array([5, 17, 42, 99, 3, 250, 7], np.int32)}, text_in)
        st.save_file({"input_ids": np.array([1, 2, vs, pad, ve, 3, 4, 5], np.int32)}, image_in)
        png = picture(f"{work}/a.png")
        cases = [("text", text, text_in, ()), ("vl", vl, text_in, ()),
                 ("vl", vl, image_in, ("--image", png))]
        for name, model, inp, extra in cases:
            for precision in ("f32", "bf16", "int8"):
                what = f"{name} {os.path.basename(inp)} {precision}"
                a = forward(vls, model, inp, f"{work}/a.safetensors", precision, extra)
                b = forward(vls, refs[name, "f32"], inp, f"{work}/b.safetensors", precision, extra)
                same_bits(a, b, what + " vs dequantized f32")
                assert np.all(np.isfinite(a)) and np.abs(a).max() > 0, what
                if precision == "bf16":
                    c = forward(vls, refs[name, "bf16"], inp, f"{work}/c.safetensors", precision,
                                extra)
                    same_bits(a, c, what + " vs dequantized bf16")
        print("OK logits bit for bit equal to the dequantized checkpoints")

        # Artifacts: the identity tells an FP8 checkpoint from its dequantized copies.
        flags = ["--precision", "bf16", "--capacity", "64", "--slots", "1"]
        art_fp8, art_f32 = f"{work}/fp8.vlsa", f"{work}/f32.vlsa"
        run([vls, "compile", "--model", vl, "--out", art_fp8] + flags)
        run([vls, "compile", "--model", refs["vl", "f32"], "--out", art_f32] + flags)
        fwd = ["--capacity", "64"]
        a = forward(vls, vl, text_in, f"{work}/a.safetensors", "bf16", fwd + ["--artifact", art_fp8])
        b = forward(vls, vl, text_in, f"{work}/b.safetensors", "bf16", fwd)
        same_bits(a, b, "fp8 with its artifact")
        for model, art in ((refs["vl", "f32"], art_fp8), (refs["vl", "bf16"], art_fp8),
                           (vl, art_f32)):
            refused([vls, "forward", "--model", model, "--input", text_in, "--output",
                     f"{work}/x.safetensors", "--precision", "bf16", "--artifact", art] + fwd,
                    ["compiled from a different checkpoint"])
        print("OK artifacts refused across FP8 and its dequantized copies")

        # Corrupt checkpoints through the command line.
        up = "model.language_model.layers.1.mlp.up_proj.weight"
        header, base = st.read_header(f"{vl}/model.safetensors")
        raw = open(f"{vl}/model.safetensors", "rb").read()
        b0, _ = header[up]["data_offsets"]
        bad = f"{work}/bad_nan"
        shutil.copytree(vl, bad)
        corrupt = bytearray(raw)
        corrupt[base + b0 + 3 * 96 + 5] = 0x7F
        open(f"{bad}/model.safetensors", "wb").write(corrupt)
        refused([vls, "forward", "--model", bad, "--input", text_in, "--output",
                 f"{work}/x.safetensors"], [f"'{up}'", "NaN code at [3, 5]"])
        bad = f"{work}/bad_method"
        shutil.copytree(vl, bad)
        cfg_bad = json.load(open(f"{bad}/config.json"))
        cfg_bad["quantization_config"]["quant_method"] = "gptq"
        json.dump(cfg_bad, open(f"{bad}/config.json", "w"))
        refused([vls, "forward", "--model", bad, "--input", text_in, "--output",
                 f"{work}/x.safetensors"], ["quant_method", "gptq", "not supported"])
        bad = f"{work}/bad_config"
        shutil.copytree(vl, bad)
        cfg_bad = json.load(open(f"{bad}/config.json"))
        cfg_bad.pop("quantization_config")
        json.dump(cfg_bad, open(f"{bad}/config.json", "w"))
        refused([vls, "forward", "--model", bad, "--input", text_in, "--output",
                 f"{work}/x.safetensors"], ["F8_E4M3", "declares no quantization_config"])
        print("OK corrupt and mismatched FP8 checkpoints refused")
    print("PASS fp8_forward")


if __name__ == "__main__":
    main()
