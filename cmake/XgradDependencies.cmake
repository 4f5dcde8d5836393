# Every dependency is a Debian 12 package; a missing one stops configuration with the package
# to install.
function(xgrad_require package debian_package)
  find_package(${package} ${ARGN} QUIET)
  if(NOT ${package}_FOUND)
    message(FATAL_ERROR "xgrad needs ${package}: install it with `apt-get install ${debian_package}` "
                        "(or run scripts/setup.sh)")
  endif()
endfunction()

xgrad_require(xtensor libxtensor-dev)
xgrad_require(xsimd libxsimd-dev)
xgrad_require(xtensor-blas libxtensor-blas-dev)
xgrad_require(cereal libcereal-dev)
set(BLA_VENDOR OpenBLAS)
xgrad_require(BLAS libopenblas-dev)
xgrad_require(Threads libc6-dev)
include(XgradFindDNNL)  # oneDNN, the float32 and bf16 gemms (xgrad/backend/onednn.cpp), without OpenCL
xgrad_require(OpenMP libgomp1)  # oneDNN's threads; xgrad sets their count (omp_set_num_threads)
include(XgradFindPCRE2)  # PCRE2, GPT-2's pre-tokenization pattern (xgrad/text/pretokenizer.cpp)
include(XgradFindUtf8proc)  # utf8proc, tokenizer.json's NFC/NFKC normalizers (xgrad/text/utf8.cpp)
