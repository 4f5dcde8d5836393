#!/usr/bin/env bash
# Installs what is missing, checks the format of the changed lines (scripts/check_format.sh), builds
# xgrad and runs the test suite through ctest three times: in Release (build/release, every
# test), with AddressSanitizer + UBSan (build/sanitize, every test but the benchmarks' smoke runs,
# consumer_subdirectory, docs_snippets and example_flags_*), and with ThreadSanitizer (build/tsan, the tests
# labelled `threads`); then runs the file loaders' fuzzers for a bounded time (build/fuzz).
#
# The sanitizer trees keep line tables only (-g1: file:line in every report, objects ~45% smaller
# than with -g, so cheaper links). ASan + UBSan stays at -O0: -O1 costs 25-60% more compile CPU
# per file, more than it would save on a suite whose ASan run is mostly process starts; the TSan
# tree, small (the library and xgrad_thread_tests) and running the threaded kernels' loops,
# uses -O1. Both register one ctest test per executable (one per test folder,
# XGRAD_CTEST_PER_EXECUTABLE): a process start under a sanitizer costs ~0.18 s of CPU (measured
# under TSan); the Release tree keeps one ctest test per gtest.
#   --configure-only     installs what is missing and configures the four trees, nothing more
#                        (scripts/fresh_machine_check.sh: a package missing from any tree fails it)
#   XGRAD_FUZZ_SECONDS   seconds per fuzzer (default 20)
#   XGRAD_JOBS           build and ctest parallelism (default: nproc)
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$XGRAD_ROOT"

run_ctest() {
  local dir=$1
  shift
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" "$@")
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# scripts/tsan.supp: what ThreadSanitizer cannot see into (OpenMP's runtime, libgomp, is not
# instrumented); every entry there says why.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$XGRAD_ROOT/scripts/tsan.supp}

# ccache when present (lib.sh, use_ccache): the consumer test's copy of the library comes from it.
use_ccache
launcher=("${LAUNCHER[@]}")
sanitizer_tree=(-DCMAKE_BUILD_TYPE=Debug -DXGRAD_CTEST_PER_EXECUTABLE=ON "${launcher[@]}")

configure_release() { configure build/release -DCMAKE_BUILD_TYPE=Release "${launcher[@]}"; }
# The benchmarks are left out of the ASan tree: their smoke tests run in the Release tree, and
# compiling six more programs at -O0 cost minutes of a CI run that must stay under 40.
configure_sanitize() {
  configure build/sanitize "${sanitizer_tree[@]}" "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g1" -DXGRAD_SANITIZE=address \
    -DXGRAD_BUILD_BENCHMARKS=OFF
}
# ThreadSanitizer: the library and xgrad_thread_tests, the tests that run several threads (the
# pool and the kernels it splits, the data loader, the generator, set_num_threads).
configure_tsan() {
  configure build/tsan "${sanitizer_tree[@]}" "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" -DXGRAD_SANITIZE=thread \
    -DXGRAD_BUILD_EXAMPLES=OFF -DXGRAD_BUILD_BENCHMARKS=OFF
}
configure_fuzz() { env XGRAD_FUZZ_BUILD_DIR=build/fuzz bash fuzz/run.sh --configure-only; }

total_start=$SECONDS
phase "install missing packages" bash scripts/setup.sh
if [[ "${1:-}" == "--configure-only" ]]; then
  phase "configure (Release)" configure_release
  phase "configure (ASan + UBSan)" configure_sanitize
  phase "configure (TSan)" configure_tsan
  phase "configure (fuzz)" configure_fuzz
  print_phase_times
  echo "==> the four trees configured in $((SECONDS - total_start))s"
  exit 0
fi
# Cheap, first: the C++ lines changed since scripts/format_base are formatted (.clang-format).
phase "format check" bash scripts/check_format.sh
phase "configure (Release)" configure_release
phase "build (Release)" build build/release
phase "ctest (Release)" run_ctest build/release
phase "configure (ASan + UBSan)" configure_sanitize
phase "build (ASan + UBSan)" build build/sanitize
# Release tree only, as they check the packaging, the docs and the programs' answers, not memory:
# consumer_subdirectory (a CMake project that adds this source tree with add_subdirectory and
# compiles the library again: at -O0 under ASan 233 of the 445 s of this phase, both cores),
# docs_snippets (the documentation's examples compiled with -fsyntax-only: nothing runs) and
# example_flags_* (1,000 program starts with hostile flag values: 200-400 s in the Release tree,
# several times that at -O0 under ASan; the parsers they reach are fuzzed and unit-tested under
# ASan).
phase "ctest (ASan + UBSan)" run_ctest build/sanitize -E '^(consumer_subdirectory|docs_snippets|example_flags_.*)$'
phase "configure (TSan)" configure_tsan
phase "build (TSan)" build build/tsan xgrad_thread_tests
phase "ctest (TSan, label threads)" run_ctest build/tsan -L threads
# Each file loader's libFuzzer target (clang, ASan + UBSan), seeded with valid files and with one
# hostile file per loader fix (each checked to be refused), for a bounded time.
phase "fuzz (bounded)" env XGRAD_FUZZ_BUILD_DIR=build/fuzz bash fuzz/run.sh "${XGRAD_FUZZ_SECONDS:-20}"
print_phase_times
echo "==> all tests passed: plain, under ASan + UBSan and (label threads) under TSan, in $((SECONDS - total_start))s"
