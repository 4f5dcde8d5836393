#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (the whole library instrumented, ASan + UBSan) and runs
# each for a bounded time, seeded with valid files written by fuzz_seeds and with one hostile file
# per loader fix (fuzz_seeds first checks each is refused with FormatError). Exits non-zero when a
# fuzzer finds a crash, a sanitizer report, an unexpected exception, a leak or a hang; the input
# that triggered it is kept under <build>/artifacts/<fuzzer>/.
#
#   fuzz/run.sh [SECONDS]        seconds per fuzzer (default 60, or $XGRAD_FUZZ_SECONDS)
#   fuzz/run.sh --configure-only configures the build tree and stops (scripts/test.sh --configure-only)
#   XGRAD_FUZZ_BUILD_DIR=...     build tree (default <repo>/build-fuzz, kept between runs, so its
#                                corpus/ grows from run to run)
#   XGRAD_FUZZ_JOBS=N            build parallelism and fuzzers run at once (default 2)
#   XGRAD_FUZZERS="a b"          which fuzzers to run (default: every fuzz/fuzz_*.cpp)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
configure_only=0
if [[ "${1:-}" == "--configure-only" ]]; then
  configure_only=1
  shift
fi
seconds=${1:-${XGRAD_FUZZ_SECONDS:-60}}
build=${XGRAD_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${XGRAD_FUZZ_JOBS:-2}
if [[ -n "${XGRAD_FUZZERS:-}" ]]; then
  read -r -a fuzzers <<<"$XGRAD_FUZZERS"
else
  fuzzers=()
  for source in "$root"/fuzz/fuzz_*.cpp; do
    name=$(basename "$source" .cpp)
    fuzzers+=("${name#fuzz_}")
  done
fi

command -v clang++ >/dev/null || { echo "fuzz/run.sh: needs clang++ (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }

# -O1 with line tables only: 30% less compile CPU than RelWithDebInfo's -O2 -g (measured on
# attention.cpp: 14.3 s against 20.3 s), file:line still in every report.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  -DXGRAD_BUILD_FUZZERS=ON -DXGRAD_BUILD_TESTS=OFF -DXGRAD_BUILD_EXAMPLES=OFF \
  -DXGRAD_BUILD_BENCHMARKS=OFF -DXGRAD_INSTALL=OFF >/dev/null
((configure_only)) && exit 0
targets=(fuzz_seeds)
for f in "${fuzzers[@]}"; do targets+=("fuzz_$f"); done
cmake --build "$build" --target "${targets[@]}" -j "$jobs"

# File:line in the reports: the sanitizers look for `llvm-symbolizer` on PATH, which Debian names
# llvm-symbolizer-14 (package llvm-14, installed by scripts/setup.sh).
if [[ -z ${ASAN_SYMBOLIZER_PATH:-} ]]; then
  for symbolizer in llvm-symbolizer-14 llvm-symbolizer; do
    if command -v "$symbolizer" >/dev/null; then
      export ASAN_SYMBOLIZER_PATH UBSAN_SYMBOLIZER_PATH
      ASAN_SYMBOLIZER_PATH=$(command -v "$symbolizer")
      UBSAN_SYMBOLIZER_PATH=$ASAN_SYMBOLIZER_PATH
      break
    fi
  done
fi
[[ -n ${ASAN_SYMBOLIZER_PATH:-} ]] || echo "fuzz/run.sh: no llvm-symbolizer (apt-get install llvm-14): reports will show raw addresses" >&2
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
rm -rf "$build/seeds"
"$build/fuzz/fuzz_seeds" "$build/seeds"

# One fuzzer per build job at a time (each is one thread), each writing its own log, printed in
# order once all are done: on 2 cores, the 7 fuzzers take half the time of one after another.
mkdir -p "$build/logs"
run_fuzzer() {
  local f=$1 corpus=$build/corpus/$1 artifacts=$build/artifacts/$1
  mkdir -p "$corpus" "$artifacts" "$build/seeds/$f"
  local options=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
                 -artifact_prefix="$artifacts/")
  [[ -f "$root/fuzz/$f.dict" ]] && options+=(-dict="$root/fuzz/$f.dict")
  echo "== fuzz_$f for ${seconds}s"
  if ! "$build/fuzz/fuzz_$f" "${options[@]}" "$corpus" "$build/seeds/$f"; then
    echo "fuzz/run.sh: fuzz_$f found a problem; reproduce with: $build/fuzz/fuzz_$f $artifacts/<file>" >&2
    return 1
  fi
}

status=0
running=0
for f in "${fuzzers[@]}"; do
  if ((running >= jobs)); then
    wait -n || status=1
    running=$((running - 1))
  fi
  run_fuzzer "$f" >"$build/logs/$f.log" 2>&1 &
  running=$((running + 1))
done
while ((running > 0)); do
  wait -n || status=1
  running=$((running - 1))
done
for f in "${fuzzers[@]}"; do cat "$build/logs/$f.log"; done
exit $status
