#!/usr/bin/env bash
# Paged KV memory (issue 33 item 1, ADR 0029; a benchmark, not a test): how many 2,000-token
# conversations `vlstack serve` runs at once in a fixed KV memory at a long capacity.
#
#   [SHAPE=qwen3-0.6b] [KV=4G] [CAPACITY=32768] [CLIENTS=18] [PROMPT=1950] [GEN=48] [THREADS=2]
#   bash bench/anchors/kv_concurrency.sh VLSTACK_BUILD_DIR [WORK]
#
# Serves CLIENTS slots of capacity CAPACITY in KV memory KV, sends CLIENTS streamed requests of
# PROMPT prompt tokens and GEN reply tokens at once (bench/server_throughput.mjs), samples
# /metrics every half second, and prints one JSON line: the pool, the most slots busy and KV
# blocks used at once, preemptions, and the per-slot design's count for the same memory
# (KV // (CAPACITY x bytes per token): every slot held its whole capacity).
set -euo pipefail
shopt -s inherit_errexit
build=$(cd "${1:?usage: kv_concurrency.sh VLSTACK_BUILD_DIR [WORK]}" && pwd)
work=${2:-/tmp/vls_kv_concurrency}
mkdir -p "$work"
work=$(cd "$work" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
vlstack=$build/src/cli/vlstack
shape=${SHAPE:-qwen3-0.6b}
kv=${KV:-4G}
capacity=${CAPACITY:-32768}
clients=${CLIENTS:-18}
prompt=${PROMPT:-1950}
gen=${GEN:-48}
threads=${THREADS:-2}
port=${PORT:-18433}
model=$work/$shape
[ -f "$model/config.json" ] || "$vlstack" make-test-model --shape "$shape" --untied --out "$model" >&2
"$vlstack" serve --model "$model" --port "$port" --slots "$clients" --capacity "$capacity" \
  --kv-memory "$kv" --precision bf16 --threads "$threads" --quiet >"$work/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.5
done
metric() { awk -v m="$1" '$1 == m { print $2 }' "$work/metrics.txt"; }
: >"$work/samples.txt"
(
  while true; do
    curl -sf "http://127.0.0.1:$port/metrics" >"$work/metrics.txt" 2>/dev/null || true
    echo "$(metric vlstack_slots_busy) $(metric vlstack_kv_blocks_used)" >>"$work/samples.txt"
    sleep 0.5
  done
) &
sampler=$!
node "$repo/bench/server_throughput.mjs" --url "http://127.0.0.1:$port" --slots "$clients" \
  --prompt-tokens "$prompt" --gen-tokens "$gen" --reps 1 --warmup 0 >"$work/client.json"
kill $sampler 2>/dev/null || true
curl -sf "http://127.0.0.1:$port/metrics" >"$work/metrics.txt"
pool_line=$(grep -m1 "KV memory:" "$work/serve.log" || true)
busy=$(awk '{ if ($1 > m) m = $1 } END { print m + 0 }' "$work/samples.txt")
used=$(awk '{ if ($2 > m) m = $2 } END { print m + 0 }' "$work/samples.txt")
# "KV memory: N blocks of 64 tokens = T tokens, 4.0 GiB (4294967296 bytes) (reason)"
pool_tokens=$(grep -o '= [0-9]* tokens' <<<"$pool_line" | grep -o '[0-9]*')
pool_bytes=$(grep -o '([0-9]* bytes)' <<<"$pool_line" | grep -o '[0-9]*')
bytes_per_token=$((pool_bytes / pool_tokens))
kv_bytes=$(numfmt --from=iec "$kv")
per_slot=$((kv_bytes / (capacity * bytes_per_token)))
printf '{"kv":"%s","capacity":%d,"clients":%d,"prompt":%d,"gen":%d,"pool":"%s","most_slots_busy":%d,"most_blocks_used":%d,"blocks_total":%s,"preemptions":%s,"per_slot_design_slots":%d,"client":%s}\n' \
  "$kv" "$capacity" "$clients" "$prompt" "$gen" "${pool_line#*KV memory: }" "$busy" "$used" \
  "$(metric vlstack_kv_blocks_total)" "$(metric vlstack_kv_preemptions_total)" "$per_slot" \
  "$(cat "$work/client.json")"
