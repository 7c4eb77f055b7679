#!/usr/bin/env bash
# The main job: install what is missing, build, then run an end-to-end demo on a generated
# tiny Qwen3-VL checkpoint (forward with an image prompt and M-RoPE, greedy decoding, a batch
# with a DeepStack request, then a compiled BF16 artifact benchmarked).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/install_deps.sh"
echo "[demo] building (build/)"
bash "$root/scripts/build.sh" "$root/build" -DVLS_BUILD_TESTS=OFF
exec /usr/bin/python3 "$root/scripts/demo.py" --vlstack "$root/build/src/cli/vlstack" --work "$root/demo"
