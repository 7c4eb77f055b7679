#!/usr/bin/env bash
# `vlstack serve` side by side with llama.cpp's `llama-server` on the same random weights and the
# same client load (issue 33's server benchmarks; a benchmark, not a test):
#   a  32 conversations of 4 turns sharing a 1,000-token system prompt, 8 at once
#      (bench/server_throughput.mjs --scenario conversations);
#   b  8 clients, 128-token prompts, 128-token replies;
#   c  one client, a 2,000-token prompt (time to first token; vlstack also with
#      --prefill-chunk 0, the unchunked prefill, for the adaptive chunk budget's check).
#
#   LLAMA=DIR [SHAPE=qwen3-0.6b] [THREADS=2] [SLOTS=8] [PRECISION=bf16] [SCENARIOS="a b c"]
#   [CONVERSATIONS=32] [SERVERS="vlstack llama-server"]
#   bash bench/anchors/serve.sh VLSTACK_BUILD_DIR [WORK]
#
# LLAMA is a llama.cpp tree built with its server (bench/anchors/build_anchor.sh with SERVER=1).
# llama-server runs with its best options for this load: SLOTS parallel sequences over one
# unified KV cache (-kvu), prompt-cache reuse (--cache-reuse 256), flash attention, SLOTS x 4,096
# context. vlstack serves SLOTS slots of capacity 4,096. One server at a time; run on a quiet
# machine. Output: one JSON line per scenario and server on stdout and in WORK/serve.jsonl.
set -euo pipefail
shopt -s inherit_errexit
build=$(cd "${1:?usage: serve.sh VLSTACK_BUILD_DIR [WORK]}" && pwd)
work=${2:-/tmp/vls_serve_anchor}
mkdir -p "$work"
work=$(cd "$work" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
vlstack=$build/src/cli/vlstack
llama=${LLAMA:?LLAMA=DIR: a llama.cpp tree with build/bin/llama-server}
llama=$(cd "$llama" && pwd)
shape=${SHAPE:-qwen3-0.6b}
threads=${THREADS:-2}
slots=${SLOTS:-8}
precision=${PRECISION:-bf16}
scenarios=${SCENARIOS:-a b c}
port=${PORT:-18431}
out=$work/serve.jsonl
: >"$out"
model=$work/$shape
[ -f "$model/config.json" ] || "$vlstack" make-test-model --shape "$shape" --untied --out "$model" >&2
gguf=$model.bf16.gguf
[ -f "$gguf" ] || PYTHONPATH=$llama/gguf-py /usr/bin/python3 "$here/hf_to_gguf.py" "$model" "$gguf" \
  --type bf16 >&2
client=("node" "$repo/bench/server_throughput.mjs" --url "http://127.0.0.1:$port" --vocab 151936)

pid=
stop_server() { [ -z "$pid" ] || { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=; }; }
trap stop_server EXIT
wait_health() {
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { echo "serve.sh: the server exited" >&2; return 1; }
    sleep 0.5
  done
  echo "serve.sh: no /health after 300 s" >&2
  return 1
}
start_vlstack() {  # extra args...
  "$vlstack" serve --model "$model" --port "$port" --slots "$slots" --capacity 4096 \
    --precision "$precision" --threads "$threads" --quiet "$@" >"$work/vlstack.log" 2>&1 &
  pid=$!
  wait_health
}
start_llama() {
  "$llama/build/bin/llama-server" -m "$gguf" --port "$port" -t "$threads" -tb "$threads" \
    -np "$slots" -kvu -c $((slots * 4096)) --cache-reuse 256 -fa on --no-webui \
    >"$work/llama-server.log" 2>&1 &
  pid=$!
  wait_health
}
run_scenario() {  # server label scenario
  local r
  case $3 in
    a) r=$("${client[@]}" --scenario conversations --conversations "${CONVERSATIONS:-32}" \
         --slots "$slots" --gen-tokens 64) ;;
    b) r=$("${client[@]}" --slots "$slots" --prompt-tokens 128 --gen-tokens 128 --reps 3) ;;
    c) r=$("${client[@]}" --slots 1 --prompt-tokens 2000 --gen-tokens 8 --reps 3) ;;
  esac
  echo "{\"server\":\"$1\",\"scenario\":\"$3\",\"label\":\"$2\",\"result\":$r}" | tee -a "$out"
}
for server in ${SERVERS:-vlstack llama-server}; do
  if [ "$server" = vlstack ]; then start_vlstack; else start_llama; fi
  for s in $scenarios; do run_scenario "$server" default "$s"; done
  stop_server
done
if [[ " $scenarios " == *" c "* ]]; then
  start_vlstack --prefill-chunk 0
  run_scenario vlstack unchunked c
  stop_server
fi
