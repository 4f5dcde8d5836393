#!/usr/bin/env bash
# Installs what is missing, builds the xgrad library and the main example in Release
# (build/release; the tests are built by test.sh) and runs the example.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$XGRAD_ROOT"

phase "install missing packages" bash scripts/setup.sh
phase "configure (Release)" configure build/release -DCMAKE_BUILD_TYPE=Release
phase "build (Release)" build build/release xgrad train_tiny
phase "run examples/train_tiny" build/release/examples/train_tiny
print_phase_times
