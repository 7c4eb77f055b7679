#!/usr/bin/env python3
"""Weights and logits that are not finite (issue 31) through the command line: `vlstack run` and
`vlstack serve` refuse a checkpoint with a NaN weight, naming the tensor and the element (exit 2;
--check-weights is the default); with --no-check-weights `run` no longer prints a reply of garbage
with exit 0 but exits 1 with the error naming the generation step. Both flags together are
refused, and --help lists them. A tiny model with a byte-level tokenizer whose special tokens sit
at the ids make-test-model gives a small vocabulary (no npm package needed)."""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

VOCAB = 512
DOWN = "model.language_model.layers.1.mlp.down_proj.weight"


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def expect(cmd, code, *needles):
    p = run(cmd)
    assert p.returncode == code and all(n in p.stderr for n in needles), \
        f"{' '.join(cmd)}: exit {p.returncode}, stderr {p.stderr!r}; wanted exit {code} and {needles}"
    return p


def bytes_to_unicode():
    """GPT-2's byte-level alphabet."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_tokenizer(model):
    """Ids 0..255 the bytes; the special tokens at make-test-model's ids for a small vocabulary
    (src/runtime/pipeline_test_util.h)."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    specials = {"<|endoftext|>": VOCAB - 2, "<|im_start|>": VOCAB - 3, "<|im_end|>": VOCAB - 1,
                "<|vision_start|>": VOCAB - 6, "<|vision_end|>": VOCAB - 5,
                "<|image_pad|>": VOCAB - 4, "<|video_pad|>": VOCAB - 7}
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "special": True, "normalized": False}
                         for c, i in specials.items()],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel"},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab,
                  "merges": []},
    }
    with open(f"{model}/tokenizer.json", "w") as f:
        json.dump(doc, f)


def set_element(model, name, index, bits):
    """Overwrites element `index` of tensor `name` of model.safetensors with raw `bits` (a NaN)."""
    path = f"{model}/model.safetensors"
    with open(path, "r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        t = json.loads(f.read(n))[name]
        size = {"BF16": 2, "F16": 2, "F32": 4}[t["dtype"]]
        f.seek(8 + n + t["data_offsets"][0] + index * size)
        f.write(bits[t["dtype"]])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    vls = ap.parse_args().vlstack
    with tempfile.TemporaryDirectory() as work:
        good = f"{work}/good"
        p = run([vls, "make-test-model", "--out", good, "--untied", "--seed", "3", "--layers", "2",
                 "--deepstack", "1"])
        assert p.returncode == 0, p.stderr
        write_tokenizer(good)
        base = ["--prompt", "hello", "--max-tokens", "4", "--threads", "2"]
        p = run([vls, "run", "--model", good] + base)
        assert p.returncode == 0, f"the clean model: exit {p.returncode}: {p.stderr}"

        bad = f"{work}/bad"
        shutil.copytree(good, bad)
        set_element(bad, DOWN, 1234, {"BF16": b"\xc0\x7f", "F16": b"\x00\x7e",
                                      "F32": b"\x00\x00\xc0\x7f"})
        named = f"tensor '{DOWN}' has a NaN at element 1234 (row 9, column 82)"
        for flags in ([], ["--check-weights"]):
            expect([vls, "run", "--model", bad] + base + flags, 2, named)
        # Unchecked, the NaN reaches the logits: an error naming the step, not garbage with exit 0.
        p = expect([vls, "run", "--model", bad, "--no-check-weights"] + base, 1,
                   "the model produced non-finite logits (NaN or infinity) at generation step 1 "
                   "(prompt of ")
        assert p.stdout.strip() == "", p.stdout
        expect([vls, "run", "--model", bad, "--check-weights", "--no-check-weights"] + base, 2,
               "--check-weights and --no-check-weights contradict each other")
        expect([vls, "run", "--model", bad, "--check-weights=false"] + base, 2,
               "--check-weights takes no value")
        # The server refuses it at load, before it listens.
        expect([vls, "serve", "--model", bad, "--port", "0", "--threads", "2", "--quiet"], 2, named)
        for cmd in ("run", "serve"):
            out = run([vls, cmd, "--help"]).stdout
            assert "--check-weights" in out and "--no-check-weights" in out, out
    print("check_weights_test: OK")


if __name__ == "__main__":
    main()
