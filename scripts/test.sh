#!/usr/bin/env bash
# Installs what is missing, builds xgrad and runs the whole test suite through ctest twice:
# in Release (build/release), then with AddressSanitizer + UBSan (build/sanitize); then runs
# the file loaders' fuzzers for a bounded time (build/fuzz).
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$XGRAD_ROOT"

run_ctest() {
  (cd "$1" && ctest --output-on-failure -j "$JOBS")
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

total_start=$SECONDS
phase "install missing packages" bash scripts/setup.sh
phase "configure (Release)" configure build/release -DCMAKE_BUILD_TYPE=Release
phase "build (Release)" build build/release
phase "ctest (Release)" run_ctest build/release
phase "configure (sanitizers)" configure build/sanitize -DCMAKE_BUILD_TYPE=Debug -DXGRAD_SANITIZE=ON
phase "build (sanitizers)" build build/sanitize
phase "ctest (sanitizers)" run_ctest build/sanitize
# Each file loader's libFuzzer target (clang, ASan + UBSan), seeded with valid files, for a
# bounded time (XGRAD_FUZZ_SECONDS, default 30 s per fuzzer).
phase "fuzz (bounded)" env XGRAD_FUZZ_BUILD_DIR=build/fuzz bash fuzz/run.sh "${XGRAD_FUZZ_SECONDS:-30}"
print_phase_times
echo "==> all tests passed, plain and under ASan + UBSan, in $((SECONDS - total_start))s"
