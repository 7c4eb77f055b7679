#!/usr/bin/env bash
# The end-to-end figures of issue 6: prompt processing and generation on the two named shapes in
# BF16 and int8, and batched decode for 1/2/4/8 slots. Prints one JSON line per run (the
# `vlstack bench --json` output). Models are generated once under $WORK.
#
#   bash bench/issue6_bench.sh [VLSTACK] [WORK] [REPS]
#
# Run on a quiet machine; the CPU is shared with nothing else while it runs (about 3 minutes
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
