#!/usr/bin/env python3
"""`vlstack bench` on a tiny generated model: the contract's JSON fields, the paired
`--baseline-slots` comparison, and clear errors for bad flags."""
import argparse
import json
import subprocess
import sys
import tempfile


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        model = f"{work}/tiny"
        run([a.vlstack, "make-test-model", "--out", model, "--hidden", "64", "--layers", "2",
             "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--intermediate", "128",
             "--vocab", "300", "--deepstack", "1"])
        base = [a.vlstack, "bench", "--model", model, "--prompt-tokens", "5", "--gen-tokens", "3",
                "--json"]
        plain = json.loads(run(base + ["--reps", "2"]).stdout)
        for key in ("model", "precision", "threads", "prompt_tokens_per_s",
                    "generation_tokens_per_s", "time_to_first_token_ms", "peak_rss_mb"):
            assert key in plain, f"missing {key}: {plain}"
        assert "baseline_slots" not in plain and "generation_ratio" not in plain, plain
        for s in ("prompt_tokens_per_s", "generation_tokens_per_s", "time_to_first_token_ms"):
            st = plain[s]
            assert 0 < st["min"] <= st["median"] <= st["max"], (s, st)

        paired = run(base + ["--reps", "3", "--slots", "4", "--baseline-slots", "1"])
        r = json.loads(paired.stdout)
        assert r["slots"] == 4 and r["baseline_slots"] == 1, r
        for s in ("baseline_generation_tokens_per_s", "generation_ratio"):
            st = r[s]
            assert 0 < st["min"] <= st["median"] <= st["max"], (s, st)
        # Every rep logs a baseline run and a main run, the baseline first in even reps (1st,
        # 3rd: rep 1/3, 3/3) and second in odd ones; the ratio is per rep.
        lines = [l for l in paired.stderr.splitlines() if l.startswith("[bench] rep ")]
        assert len(lines) == 6, paired.stderr
        order = ["baseline" in l for l in lines]
        assert order == [True, False, False, True, True, False], paired.stderr
        rate = lambda l: float(l.split("generation ")[1].split(" tok/s")[0])
        ratios = []
        for rep in range(3):
            pair = [l for l in lines if l.startswith(f"[bench] rep {rep + 1}/3")]
            base = [rate(l) for l in pair if "baseline" in l]
            main = [rate(l) for l in pair if "baseline" not in l]
            assert len(base) == 1 and len(main) == 1, pair
            ratios.append(main[0] / base[0])
        ratios.sort()
        assert abs(ratios[1] - r["generation_ratio"]["median"]) <= 0.01 * ratios[1] + 0.001, \
            (ratios, r["generation_ratio"])

        for flags, needle in ((["--baseline-slots", "0"], "--baseline-slots"),
                              (["--baseline-slots", "x"], "--baseline-slots"),
                              (["--baseline-slots", "1", "--gen-tokens", "0"], "--gen-tokens")):
            p = run([a.vlstack, "bench", "--model", model] + flags, ok=False)
            assert p.returncode != 0 and needle in p.stderr, (flags, p.returncode, p.stderr)
    print("bench_test: ok")


if __name__ == "__main__":
    main()
