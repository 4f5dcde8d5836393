#!/usr/bin/env bash
# Writes the checkpoint fixtures of a new archive layout: fixture_checkpoint()
# (tests/serialize/checkpoint_fixture.hpp) as checkpoint.bin and checkpoint.json in FOLDER, which
# tests/serialize/test_checkpoint.cpp then loads in every later build. Refuses to overwrite a
# committed fixture (their bytes are the contract).
#   scripts/make_checkpoint_fixtures.sh tests/fixtures/serialize_v4 [BUILD_DIR]
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 FOLDER [BUILD_DIR (default build/release)]" >&2
  exit 2
fi
folder=$1
build=${2:-build/release}
cd "$(dirname "$0")/.."
cmake --build "$build" -j2 --target xgrad_write_checkpoint_fixtures
"$build/tests/xgrad_write_checkpoint_fixtures" "$folder"
