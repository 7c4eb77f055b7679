#!/usr/bin/env bash
# The end-to-end figures of issue 6: prompt processing and generation on the two named shapes in
# BF16 and int8, batched decode for 1/2/4/8 slots, then the 8/1 ratio per precision from paired
# runs (`--baseline-slots 1`, REPS_RATIO repetitions). Prints one JSON line per run (the
# `vlstack bench --json` output) and a ratio summary per precision on stderr (needs python3).
# Models are generated once under $WORK.
#
#   [REPS_RATIO=9] bash bench/issue6_bench.sh [VLSTACK] [WORK] [REPS]
#
# Run on a quiet machine; the CPU is shared with nothing else while it runs (about 5 minutes
# on 2 cores with REPS=3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
vlstack=${1:-$root/build/src/cli/vlstack}
work=${2:-/tmp/vls_issue6}
reps=${3:-3}
mkdir -p "$work"
for shape in qwen3-vl-2b-text qwen3-0.6b; do
  [ -f "$work/$shape/config.json" ] || "$vlstack" make-test-model --shape "$shape" --out "$work/$shape" >&2
done
for shape in qwen3-vl-2b-text qwen3-0.6b; do
  for p in bf16 int8; do
    "$vlstack" bench --model "$work/$shape" --precision "$p" --prompt-tokens 512 --gen-tokens 128 \
      --reps "$reps" --json
  done
done
for p in bf16 int8; do
  for slots in 1 2 4 8; do
    "$vlstack" bench --model "$work/qwen3-0.6b" --precision "$p" --prompt-tokens 32 \
      --gen-tokens 32 --slots "$slots" --reps "$reps" --json
  done
done
# The 8-slot / 1-slot ratio: on a shared machine whose bandwidth swings within minutes, two runs
# minutes apart measure the machine as much as the engine. `--baseline-slots 1` pairs a 1-slot
# and an 8-slot run within every repetition (a second apart, same process), REPS_RATIO (default
# 9) repetitions; the JSON carries the per-rep ratio. A summary per precision goes to stderr.
reps_ratio=${REPS_RATIO:-9}
for p in bf16 int8; do
  line=$("$vlstack" bench --model "$work/qwen3-0.6b" --precision "$p" --prompt-tokens 32 \
    --gen-tokens 32 --slots 8 --baseline-slots 1 --reps "$reps_ratio" --json)
  echo "$line"
  echo "$line" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
b, g, q = r["baseline_generation_tokens_per_s"], r["generation_tokens_per_s"], r["generation_ratio"]
print("%s paired: 1 slot %.1f, 8 slots %.1f tok/s (medians over %d reps); 8/1 per rep min %.2f "
      "median %.2f max %.2f" % (r["precision"], b["median"], g["median"], r["reps"], q["min"],
                                q["median"], q["max"]), file=sys.stderr)'
done
