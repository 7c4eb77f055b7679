#!/usr/bin/env bash
# Installs the server tests' clients (run by scripts/test.sh before the build): the official
# OpenAI client and playwright-core (which drives Debian's chromium; it downloads no browser),
# into tests/server/node_modules. Idempotent: does nothing when the pinned versions are there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
have() {
  node -e "const p=require('$here/node_modules/'+process.argv[1]+'/package.json');
           process.exit(p.version===process.argv[2]?0:1)" "$1" "$2" 2>/dev/null
}
if have openai 6.49.0 && have playwright-core 1.65.1; then
  echo "[server] npm clients present"
  exit 0
fi
echo "[server] installing npm clients"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
