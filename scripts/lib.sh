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
