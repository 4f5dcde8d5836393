#!/usr/bin/env bash
# Installs the Debian 12 packages xgrad needs to build and test, only those missing. On a machine
# that has them all it touches nothing (no apt-get at all). Runs apt-get as root, or through
# sudo when not root.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libxtensor-dev libxtensor-blas-dev libxsimd-dev libopenblas-dev libcereal-dev
  libdnnl-dev  # oneDNN, the float32 / bf16 gemm backend (xgrad/backend/onednn.cpp)
  libpcre2-dev  # PCRE2: GPT-2's pre-tokenization pattern, Unicode properties (xgrad/text/pretokenizer.cpp)
  libutf8proc-dev  # utf8proc: Unicode normalization (NFC, NFKC) for tokenizer.json normalizers (xgrad/text/utf8.cpp)
  libgtest-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  clang libclang-rt-14-dev libomp-dev  # the libFuzzer targets (fuzz/run.sh); libomp-dev: clang's OpenMP
  libopenmpi-dev openmpi-bin  # xgrad::distributed (XGRAD_WITH_MPI) and its tests under mpirun
  ccache  # scripts/test.sh: the consumer test's copy of the library comes from the cache
  clang-format  # scripts/check_format.sh (clang-format-14 and git-clang-format-14)
  llvm-14  # llvm-symbolizer-14: file:line in the fuzzers' and sanitizers' reports (fuzz/run.sh)
  wamerican  # /usr/share/dict/words, the English word list examples/train_masked_chars learns from
  # xgrad::onnx (XGRAD_WITH_ONNX): the C++ classes compiled from onnx.proto (libonnx_proto) and
  # protobuf's runtime; python3-onnx: the tests' onnx.checker.check_model on every exported model
  libonnx-dev libprotobuf-dev python3-onnx
  bible-kjv  # the King James Bible (its `bible` program), the text examples/train_gpt learns from
  gnuplot-nox  # examples/plot_metrics.sh: the example programs draw their loss curve as a PNG after training
)
# The ONNX tests run the models in ONNX Runtime for Node.js (the npm package onnxruntime-node,
# which scripts/install_onnxruntime.sh puts into the build tree): Debian's nodejs and npm, each
# only when its command is missing (Debian's npm conflicts with a nodejs installed otherwise).
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages are installed"
  exit 0
fi

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: not root and no sudo: install them as root with apt-get install ${missing[*]}" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" </dev/null
