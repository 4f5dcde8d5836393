# shellcheck shell=bash
# Shared by quickstart.sh and test.sh (sourced): the repo root, the job count, timed phases.
set -euo pipefail

XGRAD_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=${XGRAD_JOBS:-$(nproc 2>/dev/null || echo 2)}
PHASE_TIMES=()

# phase NAME COMMAND...: runs COMMAND, prints its wall time, stops the script if it fails.
phase() {
  local name=$1
  shift
  echo "==> $name"
  local start=$SECONDS status=0
  "$@" || status=$?
  local took=$((SECONDS - start))
  PHASE_TIMES+=("$(printf '%-34s %5ds' "$name" "$took")")
  if ((status != 0)); then
    echo "==> $name FAILED (exit $status) after ${took}s" >&2
    exit "$status"
  fi
  echo "==> $name: ${took}s"
}

print_phase_times() {
  echo "==> wall time per phase"
  printf '    %s\n' "${PHASE_TIMES[@]}"
}

# configure BUILD_DIR CMAKE_ARGS...
configure() {
  local dir=$1
  shift
  cmake -S "$XGRAD_ROOT" -B "$dir" "$@"
}

# build BUILD_DIR [TARGET...]: everything, or only the given targets.
build() {
  local dir=$1
  shift
  if (($# > 0)); then
    cmake --build "$dir" --parallel "$JOBS" --target "$@"
  else
    cmake --build "$dir" --parallel "$JOBS"
  fi
}

# use_ccache: sets LAUNCHER to the cmake arguments that compile through ccache (installed by
# setup.sh) when it is present, empty otherwise. quickstart.sh's build/release and test.sh's trees
# then share the cache. CCACHE_BASEDIR (the clone's root) makes the paths ccache hashes relative
# to each build folder, so that a clone in another folder (CI's, a clean clone made to check a
# change) gets the objects another clone compiled; CCACHE_NOHASHDIR lets trees share objects built
# with -g. (consumer_subdirectory, whose copy of the library compiles in a deeper folder, then
# compiles it again: a few minutes in the Release tree.)
LAUNCHER=()
use_ccache() {
  LAUNCHER=()
  if command -v ccache >/dev/null; then
    LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    export CCACHE_NOHASHDIR=1
    export CCACHE_BASEDIR=$XGRAD_ROOT
  fi
}
