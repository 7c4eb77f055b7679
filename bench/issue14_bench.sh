#!/usr/bin/env bash
# The benchmark figures of issue 14's "Done means", all through the batch engine, on the 0.6B
# shape (untied, random weights) at BF16 unless noted:
#   a. prefix reuse: a conversation's second turn over a 2,000-token history, time to first
#      token with reuse and without (target: >= 10x sooner with reuse);
#   b. chunked prefill: 8 streams decoding while a 4,096-token prompt arrives, the streams'
#      inter-token latency p99 against their median per prefill chunk size (target: p99 within
#      3x the median for some reasonable chunk; 256 is EngineOptions' default);
#   c. 8 slots against 1, paired in every repetition, BF16 and int8 (target: >= 5x the
#      aggregate generation tokens/s).
# Prints each `vlstack bench --json` line to stderr and a table to stdout (needs python3).
#
#   [REPS=3] [REPS_RATIO=5] [CHUNKS=0,16,32,64,128,256] bash bench/issue14_bench.sh BUILD_DIR [WORK]
#
# Run on a quiet machine (about 10 minutes on 2 cores).
set -euo pipefail
build=${1:?usage: issue14_bench.sh BUILD_DIR [WORK]}
work=${2:-/tmp/vls_issue14}
reps=${REPS:-3}
reps_ratio=${REPS_RATIO:-5}
chunks=${CHUNKS:-0,16,32,64,128,256}
vlstack=$build/src/cli/vlstack
[ -x "$vlstack" ] || { echo "no vlstack at $vlstack" >&2; exit 1; }
model=$work/qwen3-0.6b-untied
mkdir -p "$work"
[ -f "$model/config.json" ] ||
  "$vlstack" make-test-model --shape qwen3-0.6b --untied --out "$model" >&2

out=$work/results.jsonl
: >"$out"
bench() {
  local line
  line=$("$vlstack" bench --model "$model" --json "$@")
  echo "$line" | tee -a "$out" >&2
}
# a. The second turn of a conversation with a 2,000-token history (turn 1 generates 4 tokens;
#    turn 2 adds 30 new ones).
bench --scenario prefix-reuse --precision bf16 --prompt-tokens 2000 --gen-tokens 4 \
  --turn-tokens 30 --reps "$reps"
# b. 8 streams decoding, a 4,096-token prompt arriving; one run per chunk size.
bench --scenario chunked-prefill --precision bf16 --streams 8 --stream-prompt-tokens 32 \
  --prompt-tokens 4096 --window-tokens 16 --prefill-chunk "$chunks"
# c. 8 slots against 1 slot, paired in every repetition.
for p in bf16 int8; do
  bench --precision "$p" --prompt-tokens 32 --gen-tokens 32 --slots 8 --baseline-slots 1 \
    --reps "$reps_ratio"
done

python3 - "$out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r.get("mode") == "prefix-reuse":
        w, wo, q = r["turn2_ttft_ms_reuse"], r["turn2_ttft_ms_no_reuse"], r["speedup"]
        print(f"a. prefix reuse ({r['precision']}, {r['history_tokens']}-token history, "
              f"turn 2 = {r['turn2_prompt_tokens']} tokens, {r['reps']} reps)")
        print(f"   turn 2 ttft with reuse {w['median']:.1f} ms ({r['cached_tokens_reuse']} cached), "
              f"without {wo['median']:.1f} ms; speedup median {q['median']:.1f}x "
              f"(min {q['min']:.1f}x) -> {'meets' if q['min'] >= 10 else 'MISSES'} >= 10x; "
              f"same tokens: {r['same_tokens']}")
    elif r.get("mode") == "chunked-prefill":
        print(f"b. chunked prefill ({r['precision']}, {r['streams']} streams, "
              f"{r['prompt_tokens']}-token prompt arriving)")
        print(f"   {'chunk':>6} {'steady p50':>11} {'ITL p50':>9} {'ITL p99':>9} {'max':>9} "
              f"{'p99/p50':>8} {'<=3x':>5} {'p99/steady':>11} {'prompt ttft':>12}")
        for x in r["runs"]:
            i, s = x["itl_ms"], x["steady_itl_ms"]
            print(f"   {x['prefill_chunk']:>6} {s['p50']:>11.1f} {i['p50']:>9.1f} {i['p99']:>9.1f} "
                  f"{i['max']:>9.1f} {x['p99_over_median']:>8.2f} "
                  f"{'yes' if x['within_3x'] else 'no':>5} {x['p99_over_steady']:>11.2f} "
                  f"{x['long_ttft_ms']:>10.0f}ms")
        print("   (ITL over the window: all streams decoding, the prompt's prefill, 16 tokens "
              "after; steady = before it arrived)")
    elif "baseline_slots" in r:
        g, b, q = r["generation_tokens_per_s"], r["baseline_generation_tokens_per_s"], r["generation_ratio"]
        print(f"c. {r['precision']}: 1 slot {b['median']:.1f}, {r['slots']} slots {g['median']:.1f} "
              f"tok/s (medians, {r['reps']} reps); {r['slots']}/1 per rep min {q['min']:.2f} "
              f"median {q['median']:.2f} max {q['max']:.2f} -> "
              f"{'meets' if q['median'] >= 5 else 'MISSES'} >= 5x")
EOF
