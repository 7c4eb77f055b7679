#!/usr/bin/env bash
# Installs the deploy tests' npm packages (run by scripts/test.sh before the build):
# kubernetes-models (the Kubernetes objects' JSON schemas, generated from Kubernetes' OpenAPI)
# and yaml, into tests/deploy/node_modules. Idempotent: does nothing when the pinned versions
# are there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
have() {
  node -e "const p=require('$here/node_modules/'+process.argv[1]+'/package.json');
           process.exit(p.version===process.argv[2]?0:1)" "$1" "$2" 2>/dev/null
}
if have kubernetes-models 4.5.1 && have yaml 2.9.1; then
  echo "[deploy] npm packages present"
  exit 0
fi
echo "[deploy] installing npm packages"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
