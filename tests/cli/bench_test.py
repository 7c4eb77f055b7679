#!/usr/bin/env python3
"""`vlstack bench` on a tiny generated model: the contract's JSON fields, the paired
`--baseline-slots` comparison, `--warmup`, the kernel-loop, serving and scenario modes,
`--image` (vision encode and image time to first token), and clear errors for bad flags."""
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
        common = [a.vlstack, "bench", "--model", model, "--prompt-tokens", "5", "--gen-tokens",
                  "3", "--json"]
        plain = json.loads(run(common + ["--reps", "2"]).stdout)
        for key in ("model", "precision", "threads", "prompt_tokens_per_s",
                    "generation_tokens_per_s", "time_to_first_token_ms", "peak_rss_mb"):
            assert key in plain, f"missing {key}: {plain}"
        assert "baseline_slots" not in plain and "generation_ratio" not in plain, plain
        for s in ("prompt_tokens_per_s", "generation_tokens_per_s", "time_to_first_token_ms"):
            st = plain[s]
            assert 0 < st["min"] <= st["median"] <= st["max"], (s, st)

        # --warmup: untimed repetitions first, logged as such, not in the statistics.
        warm = run(common + ["--reps", "2", "--warmup", "2"])
        w = json.loads(warm.stdout)
        assert w["warmup"] == 2 and w["reps"] == 2 and plain["warmup"] == 0, (w, plain)
        logged = [l for l in warm.stderr.splitlines() if l.startswith("[bench] ")]
        assert [l.split(":")[0] for l in logged if "warm-up" in l or " rep " in l] == [
            "[bench] warm-up 1/2 (not counted)", "[bench] warm-up 2/2 (not counted)",
            "[bench] rep 1/2", "[bench] rep 2/2"], warm.stderr

        paired = run(common + ["--reps", "3", "--slots", "4", "--baseline-slots", "1"])
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

        # The engine options are taken (and reported); the kernel loop still runs.
        eng = json.loads(run(common + ["--slots", "2", "--prefill-chunk", "2",
                                     "--no-prefix-reuse"]).stdout)
        assert eng["mode"] == "engine" and eng["prefill_chunk"] == 2, eng
        assert eng["prefix_reuse"] is False, eng
        assert eng["generation_tokens_per_s"]["min"] > 0, eng
        kl = json.loads(run(common + ["--kernel-loop", "--slots", "2"]).stdout)
        assert kl["mode"] == "kernel-loop" and kl["generation_tokens_per_s"]["min"] > 0, kl

        # Serving: Poisson arrivals (and all at once); every request's tokens are counted.
        for rate in ("50", "inf"):
            sv = json.loads(run([a.vlstack, "bench", "--model", model, "--serve", "--requests",
                                 "6", "--rate", rate, "--seed", "3", "--prompt-tokens", "5",
                                 "--gen-tokens", "4", "--slots", "2", "--prefill-chunk", "3",
                                 "--json"]).stdout)
            assert sv["mode"] == "serve" and sv["requests"] == 6, sv
            assert sv["request_throughput"] > 0 and sv["output_token_throughput"] > 0, sv
            assert abs(sv["output_token_throughput"] / sv["request_throughput"] - 4) < 0.01, sv
            assert sv["ttft_ms"]["n"] == 6 and sv["itl_ms"]["n"] == 6 * 3, sv
            assert sv["e2e_latency_ms"]["n"] == 6, sv
            for k in ("ttft_ms", "itl_ms", "e2e_latency_ms"):
                d = sv[k]
                assert 0 <= d["p50"] <= d["p99"] <= d["max"], (k, d)
        human = run([a.vlstack, "bench", "--model", model, "--serve", "--requests", "2",
                     "--prompt-tokens", "3", "--gen-tokens", "2"]).stdout
        for words in ("request throughput", "output token throughput", "time to first token",
                      "inter-token latency", "end-to-end latency"):
            assert words in human, human

        # Scenarios: prefix reuse (turn 2 reuses turn 1, same tokens both ways) and chunked
        # prefill (one run per chunk size).
        pr = json.loads(run([a.vlstack, "bench", "--model", model, "--scenario", "prefix-reuse",
                             "--prompt-tokens", "40", "--gen-tokens", "3", "--turn-tokens", "5",
                             "--reps", "2", "--json"]).stdout)
        assert pr["cached_tokens_reuse"] >= 40 and pr["cached_tokens_no_reuse"] == 0, pr
        assert pr["same_tokens"] is True and pr["turn2_prompt_tokens"] == 48, pr
        assert pr["turn2_ttft_ms_reuse"]["min"] > 0 and pr["speedup"]["min"] > 0, pr
        cp = json.loads(run([a.vlstack, "bench", "--model", model, "--scenario",
                             "chunked-prefill", "--streams", "2", "--stream-prompt-tokens", "4",
                             "--prompt-tokens", "40", "--window-tokens", "3",
                             "--prefill-chunk", "0,8", "--json"]).stdout)
        assert [r["prefill_chunk"] for r in cp["runs"]] == [0, 8], cp
        for r in cp["runs"]:
            assert r["itl_ms"]["n"] > 0 and r["steady_itl_ms"]["n"] > 0, r
            assert r["long_ttft_ms"] > 0, r
        # Chunk 8 takes 5 steps for the 40-token prompt: more steps than unchunked.
        assert cp["runs"][1]["steps"] > cp["runs"][0]["steps"], cp

        for flags, needle in ((["--baseline-slots", "0"], "--baseline-slots"),
                              (["--baseline-slots", "x"], "--baseline-slots"),
                              (["--baseline-slots", "1", "--gen-tokens", "0"], "--gen-tokens"),
                              (["--rate", "2"], "--rate"),
                              (["--warmup", "-1"], "--warmup"),
                              (["--serve", "--warmup", "1"], "--warmup"),
                              (["--serve", "--rate", "0"], "--rate"),
                              (["--serve", "--rate", "x"], "--rate"),
                              (["--prefill-chunk", "1,2"], "--prefill-chunk"),
                              (["--prefill-chunk", "-1"], "--prefill-chunk"),
                              (["--kernel-loop", "--prefill-chunk", "4"], "--kernel-loop"),
                              (["--scenario", "nope"], "--scenario"),
                              (["--serve", "--scenario", "prefix-reuse"], "--scenario"),
                              (["--scenario", "chunked-prefill", "--streams", "2", "--slots",
                                "2"], "--slots")):
            p = run([a.vlstack, "bench", "--model", model] + flags, ok=False)
            assert p.returncode != 0 and needle in p.stderr, (flags, p.returncode, p.stderr)
        # --image: a tiny Qwen3-VL with a vision tower and two PNGs (one repeated): the text
        # fields as before, plus the vision figures per rep.
        vl = f"{work}/tiny_vl"
        run([a.vlstack, "make-test-model", "--out", vl])
        png_a, png_b = f"{work}/a.png", f"{work}/b.png"
        run(["/usr/bin/python3", "-c",
             "import sys\nfrom PIL import Image\n"
             "Image.new('RGB', (96, 64), (200, 30, 90)).save(sys.argv[1])\n"
             "Image.effect_noise((40, 72), 60).convert('RGB').save(sys.argv[2])\n",
             png_a, png_b])
        vcommon = [a.vlstack, "bench", "--model", vl, "--prompt-tokens", "9", "--gen-tokens", "2",
                   "--reps", "2", "--json"]
        vi = run(vcommon + ["--image", png_a, "--image", png_b, "--image", png_a])
        v = json.loads(vi.stdout)
        for key in ("prompt_tokens_per_s", "generation_tokens_per_s", "time_to_first_token_ms",
                    "peak_rss_mb"):
            assert key in v, f"missing {key}: {v}"
        assert v["images"] == 3, v
        for key in ("vision_encode_ms", "vision_patches", "vision_gflops_per_s",
                    "image_time_to_first_token_ms"):
            st = v[key]
            assert 0 < st["min"] <= st["median"] <= st["max"], (key, st)
        # 96x64 and 72x40 round to multiples of 32 (patch 16, merge 2) within the tiny model's
        # pixel limits: the patches are the same every rep, at least 3 windows of 4 patches.
        assert v["vision_patches"]["min"] == v["vision_patches"]["max"] >= 12, v
        # The image request includes the encode.
        assert v["image_time_to_first_token_ms"]["min"] >= v["vision_encode_ms"]["min"] * 0.5, v
        assert len([l for l in vi.stderr.splitlines() if "vision encode" in l]) == 2, vi.stderr
        assert "vision_encode_ms" not in plain, plain
        human = run(vcommon[:-1] + ["--image", png_b]).stdout
        for words in ("vision encode", "vision GFLOP/s", "image time to first"):
            assert words in human, human
        for flags, needle in ((["--image", f"{work}/missing.png"], "missing.png"),
                              (["--image", png_a, "--kernel-loop"], "--image"),
                              (["--image", png_a, "--serve"], "--image")):
            p = run([a.vlstack, "bench", "--model", vl] + flags, ok=False)
            assert p.returncode != 0 and needle in p.stderr, (flags, p.returncode, p.stderr)

        h = run([a.vlstack, "bench", "--help"]).stdout
        for word in ("--serve", "--rate", "--scenario", "--prefill-chunk", "--kernel-loop",
                     "--image", "vision_encode_ms", "image_time_to_first_token_ms"):
            assert word in h, (word, h)
    print("bench_test: ok")


if __name__ == "__main__":
    main()
