#!/usr/bin/env bash
# The end-to-end figures of issue 6: prompt processing and generation on the two named shapes in
# BF16 and int8, batched decode for 1/2/4/8 slots, then ROUNDS (default 3) alternating 1- and
# 8-slot runs per precision for the 8/1 ratio. Prints one JSON line per run (the
# `vlstack bench --json` output) and a ratio summary per precision on stderr (needs python3).
# Models are generated once under $WORK.
#
#   [ROUNDS=3] bash bench/issue6_bench.sh [VLSTACK] [WORK] [REPS]
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
# The 8-slot / 1-slot ratio from alternating runs: on a shared machine whose bandwidth swings
# within minutes, two runs minutes apart measure the machine as much as the engine. Prints one
# summary line per precision (medians over ROUNDS alternating pairs) to stderr.
rounds=${ROUNDS:-3}
for p in bf16 int8; do
  pairs=()
  for r in $(seq "$rounds"); do
    for slots in 1 8; do
      line=$("$vlstack" bench --model "$work/qwen3-0.6b" --precision "$p" --prompt-tokens 32 \
        --gen-tokens 32 --slots "$slots" --reps "$reps" --json)
      echo "$line"
      pairs+=("$line")
    done
  done
  printf '%s\n' "${pairs[@]}" | python3 -c '
import json, statistics, sys
runs = [json.loads(l) for l in sys.stdin]
one = [r["generation_tokens_per_s"]["median"] for r in runs if r["slots"] == 1]
eight = [r["generation_tokens_per_s"]["median"] for r in runs if r["slots"] == 8]
ratios = [e / o for o, e in zip(one, eight)]
print("%s alternating: 1 slot %.1f, 8 slots %.1f tok/s (medians); 8/1 per round %s, median %.2f"
      % (runs[0]["precision"], statistics.median(one), statistics.median(eight),
         " ".join("%.2f" % x for x in ratios), statistics.median(ratios)), file=sys.stderr)'
done
