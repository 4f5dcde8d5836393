#!/usr/bin/env bash
# Installs ONNX Runtime for Node.js (the npm package onnxruntime-node, whose tarball ships the
# linux-x64 libonnxruntime) into DIR, at the version the ONNX tests were written against; does
# nothing when that version is already there. Its postinstall step would download CUDA providers
# from NuGet (and fail offline): ONNXRUNTIME_NODE_INSTALL=skip skips it, the CPU runtime is inside.
#
#   scripts/install_onnxruntime.sh DIR     (ctest's onnx_runtime_install: DIR = <build tree>/onnxruntime)
# Exits 77 (a skip for ctest) when npm cannot reach its registry.
set -euo pipefail
version=1.30.0
dir=${1:?usage: install_onnxruntime.sh DIR}
package=$dir/node_modules/onnxruntime-node/package.json
if [[ -f $package ]] && grep -q "\"version\": \"$version\"" "$package"; then
  echo "onnxruntime-node $version is installed in $dir"
  exit 0
fi
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "FAIL: '$tool' is missing: run scripts/setup.sh (Debian's nodejs and npm)" >&2; exit 1; }
done
# Without npm's registry (an offline machine, a proxy) there is nothing to install: exit 77, which
# ctest reports as a skip (SKIP_RETURN_CODE), and say why.
if ! timeout 60 npm ping >/dev/null 2>&1; then
  echo "SKIP: npm cannot reach its registry ($(npm config get registry)): onnxruntime-node is not installed," \
       "and the ONNX Runtime checks (ctest's onnx_runtime, step 6 of the examples' tests) skip" >&2
  exit 77
fi
mkdir -p "$dir"
ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --prefix "$dir" "onnxruntime-node@$version"
echo "installed onnxruntime-node $version in $dir"
