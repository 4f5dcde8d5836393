// Which library computes xgrad's float32 matrix products (matmul, linear, attention, forward and
// backward): oneDNN (the default: Debian's libdnnl, the kernels PyTorch itself uses on CPU, picks
// the widest instruction set of the CPU at run time) or OpenBLAS (through xtensor-blas). float64
// products always use OpenBLAS dgemm. In a program:
// compile: snippet
//   set_gemm_backend(GemmBackend::openblas);
//
// or from the shell, `XGRAD_GEMM_BACKEND=openblas ./train`, read once, the first time a gemm runs
// or the backend is queried; set_gemm_backend overrides it.
//
// An XGRAD_GEMM_BACKEND other than "onednn" or "openblas" makes that first use throw
// std::invalid_argument naming the variable and the value. Both backends keep results
// deterministic for a given thread count (see backend/parallel.hpp).
#pragma once

namespace xgrad {

enum class GemmBackend { onednn, openblas };

void set_gemm_backend(GemmBackend backend);
GemmBackend get_gemm_backend();

// "onednn" or "openblas".
const char* gemm_backend_name(GemmBackend backend);

}  // namespace xgrad
