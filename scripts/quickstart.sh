#!/usr/bin/env bash
# Installs what is missing, builds the xgrad library and the main example, train_toy_encoder
# (a small encoder learns to sort digits), in Release
# (build/release; the tests are built by test.sh) and runs the example.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$XGRAD_ROOT"

phase "install missing packages" bash scripts/setup.sh
# Through ccache when present, as test.sh builds: the same objects then fill the cache that
# test.sh's trees and its consumer test read.
use_ccache
phase "configure (Release)" configure build/release -DCMAKE_BUILD_TYPE=Release "${LAUNCHER[@]}"
phase "build (Release)" build build/release train_toy_encoder
# It writes toy_encoder.csv, toy_encoder.ckpt (and toy_encoder.png with gnuplot) in build/toy.
phase "run examples/train_toy_encoder" bash -c 'mkdir -p build/toy && cd build/toy && ../release/examples/train_toy_encoder'
print_phase_times
