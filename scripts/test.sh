#!/usr/bin/env bash
# The whole test suite: install what is missing, build with warnings as errors, run every test,
# clang-format and clang-tidy, then the sanitizer build of the tests that guard untrusted input
# and the ThreadSanitizer build of the concurrent code.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# The free disk, printed before each build: a build that fails for want of space says so in the log.
disk() { echo "disk: $(df -Ph . | awk 'NR == 2 { print $4 }') free, build/ holds $(du -sh build 2>/dev/null | cut -f1)"; }
# On a machine with little disk (under VLS_PRUNE_BELOW_GB free, default 12) a finished stage's
# build folder is removed before the next stage builds; with room it stays for incremental rebuilds.
prune() {
  local free_gb
  free_gb=$(df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }')
  if [ "$free_gb" -lt "${VLS_PRUNE_BELOW_GB:-12}" ]; then
    echo "disk: ${free_gb}G free, removing $1 (finished)"
    rm -rf "$1"
  fi
}
# Each stage's header says when it started and how far into the run that is, so a slow CI run
# shows where its time went.
stage() { echo "== $1 == ($(date -u +%H:%M:%S) UTC, $((SECONDS / 60)) min in)"; }
bash scripts/install_deps.sh
for setup in tests/*/setup.sh; do
  [ -f "$setup" ] && bash "$setup"
done

stage "build (warnings as errors)"
disk
bash scripts/build.sh "$root/build/ci" -DVLS_WERROR=ON -DVLS_LINE_TABLES_ONLY=ON
stage "tests"
(cd build/ci && ctest --output-on-failure -j2 --timeout 900)

stage "clang-format"
git ls-files '*.cc' '*.h' '*.c' | xargs clang-format --dry-run --Werror
echo "clang-format: clean"

stage "clang-tidy"
tidy_log=$(mktemp)
git ls-files 'src/*.cc' | grep -v '_test\.cc$' \
  | xargs -P2 -n4 clang-tidy -p build/ci --quiet --extra-arg=-Wno-unknown-warning-option 2>/dev/null \
  | tee "$tidy_log"
if grep -qE '(warning|error):' "$tidy_log"; then
  echo "clang-tidy reported findings"; exit 1
fi
rm -f "$tidy_log"
echo "clang-tidy: clean"
prune build/ci

stage "sanitizer build (address, undefined) of the untrusted-input tests"
disk
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DVLS_SANITIZE=ON -DVLS_WERROR=ON >/dev/null
cmake --build build/asan -j2 --target untrusted_tests vlstack
(cd build/asan && ctest --output-on-failure -j2 -L untrusted --timeout 900)
prune build/asan

stage "ThreadSanitizer build of the thread pool, batch engine and server tests"
disk
cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVLS_TSAN=ON -DVLS_WERROR=ON \
  -DVLS_LINE_TABLES_ONLY=ON >/dev/null
cmake --build build/tsan -j2 --target thread_pool_test batch_test server_service_test
TSAN_OPTIONS="halt_on_error=1" build/tsan/src/base/thread_pool_test
TSAN_OPTIONS="halt_on_error=1" build/tsan/src/runtime/batch_test
TSAN_OPTIONS="halt_on_error=1" build/tsan/src/server/server_service_test
disk
stage "all checks passed"
