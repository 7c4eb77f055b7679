#!/usr/bin/env bash
# Prompt-lookup speculative decoding (issue 18 part 4, docs/speculative.md): single-stream
# generation tokens/s with and without `--speculate ngram`, paired per repetition, on the 0.6B
# shape with random weights, 2 threads, BF16 and int8:
#   copy: the tied model (its greedy chains repeat their input token: an input-grounded,
#         copying task where drafts are accepted);
#   free: the untied model (its output varies: acceptance near 0, the cost of speculating).
# Prints each `vlstack bench --json` line.
#
#   [REPS=3] [GEN=128] [PROMPT=128] [K=8] bash bench/speculative_bench.sh BUILD_DIR [WORK]
set -euo pipefail
build=${1:?usage: speculative_bench.sh BUILD_DIR [WORK]}
work=${2:-/tmp/vls_speculative}
reps=${REPS:-3}
gen=${GEN:-128}
prompt=${PROMPT:-128}
k=${K:-8}
vlstack=$build/src/cli/vlstack
[ -x "$vlstack" ] || { echo "no vlstack at $vlstack" >&2; exit 1; }
mkdir -p "$work"
for tie in tied untied; do
  [ -f "$work/$tie/config.json" ] ||
    "$vlstack" make-test-model --shape qwen3-0.6b --$tie --out "$work/$tie" >&2
done
for precision in bf16 int8; do
  for tie in tied untied; do
    echo "# $tie $precision"
    "$vlstack" bench --model "$work/$tie" --precision "$precision" --threads 2 --slots 1 \
      --prompt-tokens "$prompt" --gen-tokens "$gen" --reps "$reps" \
      --speculate ngram --draft-tokens "$k" --json
  done
done
