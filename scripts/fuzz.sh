#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser with libFuzzer (clang), ASan and UBSan.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 600)] [TARGET...] (default: every target)
# Targets are the fuzz/NAME_fuzz.cc files. Each runs on build/fuzz/corpus/NAME, seeded from
# tests/corpus/NAME; a crash leaves crash-* / timeout-* / oom-* files in build/fuzz/artifacts/NAME
# and fails the script. Interesting inputs found (new coverage) can be minimised into
# tests/corpus/NAME with: build/fuzz/fuzz/NAME_fuzz -merge=1 tests/corpus/NAME build/fuzz/corpus/NAME
# Runs up to VLS_FUZZ_JOBS targets at once (default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-600}
shift || true
dir=$root/build/fuzz
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in fuzz/*_fuzz.cc; do
    n=$(basename "$f" _fuzz.cc)
    targets+=("$n")
  done
fi
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVLS_LIBFUZZER=ON \
  -DVLS_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
cmake --build "$dir" -j"${VLS_JOBS:-2}" --target "${targets[@]/%/_fuzz}"

run_one() {
  local n=$1
  mkdir -p "$dir/corpus/$n" "$dir/artifacts/$n"
  # -rss_limit_mb: an input of a few KB must never need 2 GiB; -timeout: nor take 10 s.
  "$dir/fuzz/${n}_fuzz" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/artifacts/$n/" \
    "$dir/corpus/$n" "tests/corpus/$n" >"$dir/$n.log" 2>&1
  local rc=$?
  local execs cov
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/$n.log" | grep -o '[0-9]*$' || true)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$dir/$n.log" | tail -1 || true)
  echo "$n: rc=$rc executions=${execs:-?} ${cov:-} corpus=$(ls "$dir/corpus/$n" | wc -l)"
  return $rc
}

jobs=${VLS_FUZZ_JOBS:-2}
failed=0
pids=()
for n in "${targets[@]}"; do
  run_one "$n" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
exit $failed
