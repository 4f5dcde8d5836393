// oneDNN behind the float32 gemm and the bf16 gemm of autocast (gemm.cpp chooses when).
// The one translation unit that includes oneDNN and <omp.h> (Debian's oneDNN runs on OpenMP).
//
// fp32: dnnl_sgemm, which needs no setup per call (it dispatches straight to oneDNN's jit gemm),
// measured faster than cached matmul primitives on most of the shapes of a training step.
// bf16: matmul primitives (bf16 x bf16 -> f32), cached per thread by shape, so a step's shapes
// pay their setup once.
#include <xgrad/backend/onednn.hpp>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>

#include <omp.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <xgrad/base/check.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/backend/signals.hpp>

namespace xgrad {

namespace detail {

// ---- calls -------------------------------------------------------------------------------

namespace {

// Runs f, a call into oneDNN, on the calling thread alone (its OpenMP thread count at 1, then
// restored; the pool splits large products into one call per thread) and its asynchronous signals blocked (signals.hpp: oneDNN's jit gemm kernels move the
// stack pointer into the heap, where a signal handler's frame would land). Every oneDNN
// computation goes through here; OpenMP threads it starts inherit the blocked mask.
template <class F>
void on_this_thread(const F& f) {
  const AsyncSignalBlock no_signals;
  const int previous = omp_get_max_threads();
  if (previous != 1) omp_set_num_threads(1);
  f();
  if (previous != 1) omp_set_num_threads(previous);
}

void check_int_range(const char* what, std::size_t m, std::size_t n, std::size_t k, std::size_t lda,
                     std::size_t ldb, std::size_t ldc) {
  constexpr std::size_t kMax = std::numeric_limits<std::int32_t>::max();
  XGRAD_CHECK(m <= kMax && n <= kMax && k <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax, what,
              ": sizes (m, n, k) = (", m, ", ", n, ", ", k, ") exceed the supported range");
}

}  // namespace

// ---- fp32 ----------------------------------------------------------------------------------

void onednn_sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                  const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                  std::size_t ldc) {
  check_int_range("gemm (oneDNN)", m, n, k, lda, ldb, ldc);
  // oneDNN rejects a leading dimension below the stored row length even when it is never used.
  const auto ilda = static_cast<dnnl_dim_t>(std::max(lda, trans_a ? m : k));
  const auto ildb = static_cast<dnnl_dim_t>(std::max(ldb, trans_b ? k : n));
  const auto ildc = static_cast<dnnl_dim_t>(std::max(ldc, n));
  dnnl_status_t status = dnnl_success;
  on_this_thread([&] {
    status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', static_cast<dnnl_dim_t>(m),
                        static_cast<dnnl_dim_t>(n), static_cast<dnnl_dim_t>(k), alpha, a, ilda, b, ildb, beta, c,
                        ildc);
  });
  XGRAD_CHECK(status == dnnl_success, "gemm (oneDNN): dnnl_sgemm(m=", m, ", n=", n, ", k=", k,
              ") failed with status ", static_cast<int>(status));
}

// ---- bf16 ----------------------------------------------------------------------------------

namespace {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// One cached bf16 matmul: op(A) rows [r0, r0 + mb) of an (m, k) op(A) as dense bf16.
struct Bf16Key {
  bool trans_a, trans_b;
  std::size_t mb, m, n, k, ldc;
  float alpha, beta;
  bool operator<(const Bf16Key& o) const {
    return std::tie(trans_a, trans_b, mb, m, n, k, ldc, alpha, beta) <
           std::tie(o.trans_a, o.trans_b, o.mb, o.m, o.n, o.k, o.ldc, o.alpha, o.beta);
  }
};
// The primitive and its four memory objects, made once without buffers: each call points them at
// its operands (set_data_handle), so that a call allocates nothing (attention's per-head products
// are a few microseconds each, and a step makes thousands).
struct Bf16Plan {
  dnnl::matmul prim;
  dnnl::memory::desc scratch;
  dnnl::memory a, b, c, scratchpad;
};

// Per thread: the stream, the primitives of the shapes seen, a scratchpad, and the bf16 copies of
// small operands (up to kKeptPackedElements). Larger copies are per call: kept, they would add the
// step's largest operands to peak memory.
constexpr std::size_t kKeptPackedElements = std::size_t(1) << 17;  // 256 KiB of bf16
struct Bf16Cache {
  dnnl::stream stream{cpu_engine()};
  std::map<Bf16Key, Bf16Plan> plans;
  std::vector<std::uint8_t> scratch;
  std::vector<std::uint16_t> packed;
};
Bf16Cache& bf16_cache() {
  thread_local Bf16Cache cache;
  return cache;
}

// nullptr when oneDNN has no bf16 matmul for it on this CPU.
const Bf16Plan* bf16_plan(Bf16Cache& cache, const Bf16Key& key) {
  auto it = cache.plans.find(key);
  if (it != cache.plans.end()) return &it->second;
  // A program whose shapes keep changing (variable sequence lengths) would grow the cache without
  // bound: past kMaxPlans it starts over. A training step uses a few dozen.
  constexpr std::size_t kMaxPlans = 512;
  if (cache.plans.size() >= kMaxPlans) cache.plans.clear();
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  const auto mb = static_cast<dnnl::memory::dim>(key.mb), m = static_cast<dnnl::memory::dim>(key.m),
             n = static_cast<dnnl::memory::dim>(key.n), k = static_cast<dnnl::memory::dim>(key.k);
  // Dense bf16 operands: A stored (m, k), or (k, m) when transposed; B (k, n), or (n, k).
  dnnl::memory::desc a(dims{mb, k}, dt::bf16, key.trans_a ? dims{1, m} : dims{k, 1});
  dnnl::memory::desc b(dims{k, n}, dt::bf16, key.trans_b ? dims{1, k} : dims{n, 1});
  dnnl::memory::desc c(dims{mb, n}, dt::f32, dims{static_cast<dnnl::memory::dim>(key.ldc), 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
    const dnnl::engine& eng = cpu_engine();
    Bf16Plan plan{dnnl::matmul(pd),
                  pd.scratchpad_desc(),
                  dnnl::memory(a, eng, DNNL_MEMORY_NONE),
                  dnnl::memory(b, eng, DNNL_MEMORY_NONE),
                  dnnl::memory(c, eng, DNNL_MEMORY_NONE),
                  dnnl::memory(pd.scratchpad_desc(), eng, DNNL_MEMORY_NONE)};
    return &cache.plans.emplace(key, std::move(plan)).first->second;
  } catch (const dnnl::error&) {
    return nullptr;  // unimplemented: no bf16 path on this CPU
  }
}

// The plan's primitive on a, b, c (the C API's execute: the C++ one builds a map of its arguments
// on every call).
void run_bf16(const Bf16Plan& plan, const std::uint16_t* a, const std::uint16_t* b, float* c) {
  Bf16Cache& cache = bf16_cache();
  const std::size_t scratch_bytes = plan.scratch.get_size();
  if (cache.scratch.size() < scratch_bytes) cache.scratch.resize(scratch_bytes);
  plan.a.set_data_handle(const_cast<std::uint16_t*>(a));
  plan.b.set_data_handle(const_cast<std::uint16_t*>(b));
  plan.c.set_data_handle(c);
  plan.scratchpad.set_data_handle(cache.scratch.data());
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, plan.a.get()},
                                  {DNNL_ARG_WEIGHTS, plan.b.get()},
                                  {DNNL_ARG_DST, plan.c.get()},
                                  {DNNL_ARG_SCRATCHPAD, plan.scratchpad.get()}};
  dnnl_status_t status = dnnl_primitive_execute(plan.prim.get(), cache.stream.get(), 4, args);
  if (status == dnnl_success) status = dnnl_stream_wait(cache.stream.get());
  XGRAD_CHECK(status == dnnl_success, "gemm_bf16 (oneDNN): the matmul failed with status ", static_cast<int>(status));
}

}  // namespace

bool onednn_gemm_bf16(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                      const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                      std::size_t ldc) {
  // No operand entry is read: C alone is written (or left alone).
  if (m == 0 || n == 0 || k == 0)
    return onednn_gemm_bf16_packed(trans_a, trans_b, m, n, k, alpha, nullptr, nullptr, beta, c, ldc);
  check_int_range("gemm_bf16 (oneDNN)", m, n, k, lda, ldb, ldc);
  // A CPU without a bf16 matmul returns here, before any packing, with C untouched.
  if (bf16_plan(bf16_cache(), Bf16Key{trans_a, trans_b, m, m, n, k, std::max(ldc, n), alpha, beta}) == nullptr)
    return false;
  // Written by this thread, read by the pool's chunks (which call no onednn_gemm_bf16 themselves:
  // inside a chunk a product is one block).
  const std::size_t elements = m * k + k * n;
  std::vector<std::uint16_t>& kept = bf16_cache().packed;
  std::unique_ptr<std::uint16_t[]> own;
  if (elements <= kKeptPackedElements) {
    if (kept.size() < elements) kept.resize(kKeptPackedElements);
  } else {
    own.reset(new std::uint16_t[elements]);
  }
  std::uint16_t* const pa = own ? own.get() : kept.data();
  std::uint16_t* const pb = pa + m * k;
  if (trans_a) pack_bf16(a, k, m, std::max(lda, m), pa);
  else pack_bf16(a, m, k, std::max(lda, k), pa);
  if (trans_b) pack_bf16(b, n, k, std::max(ldb, k), pb);
  else pack_bf16(b, k, n, std::max(ldb, n), pb);
  return onednn_gemm_bf16_packed(trans_a, trans_b, m, n, k, alpha, pa, pb, beta, c, ldc);
}

bool onednn_gemm_bf16_packed(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                             const std::uint16_t* pa, const std::uint16_t* pb, float beta, float* c,
                             std::size_t ldc) {
  if (m == 0 || n == 0) return true;
  if (k == 0) {
    // op(A) op(B) is an (m, n) matrix of zeros: C = beta C (beta = 0 overwrites, NaN included).
    for (std::size_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      if (beta == 0.0f) std::fill(row, row + n, 0.0f);
      else for (std::size_t j = 0; j < n; ++j) row[j] *= beta;
    }
    return true;
  }
  check_int_range("gemm_bf16 (oneDNN)", m, n, k, m, n, ldc);
  ldc = std::max(ldc, n);
  Bf16Cache& cache = bf16_cache();
  const Bf16Plan* whole = bf16_plan(cache, Bf16Key{trans_a, trans_b, m, m, n, k, ldc, alpha, beta});
  if (whole == nullptr) return false;  // no bf16 matmul on this CPU: C untouched
  // Rows [r0, r1) of C, one single-threaded oneDNN call (its primitive cached by the thread that runs it).
  auto block = [&](std::size_t r0, std::size_t r1) {
    Bf16Cache& mine = bf16_cache();
    const Bf16Plan* plan = bf16_plan(mine, Bf16Key{trans_a, trans_b, r1 - r0, m, n, k, ldc, alpha, beta});
    XGRAD_CHECK(plan != nullptr, "gemm_bf16 (oneDNN): no bf16 matmul for a (", r1 - r0, ", ", k, ") block");
    on_this_thread([&] { run_bf16(*plan, trans_a ? pa + r0 : pa + r0 * k, pb, c + r0 * ldc); });
  };
  // As the fp32 gemm (gemm.hpp's split): 16-row tiles, one block per thread.
  constexpr std::size_t kTile = kGemmTile;
  if (m * n * k < kGemmSplitMinMacs || in_parallel_region()) {
    block(0, m);
    return true;
  }
  parallel_for((m + kTile - 1) / kTile, kGemmMinBlockTiles,
               [&](std::size_t t0, std::size_t t1) { block(t0 * kTile, std::min(t1 * kTile, m)); });
  return true;
}

// ---- ISA -----------------------------------------------------------------------------------

std::string onednn_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "isa 0x" + [] {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%x", static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
      return std::string(buf);
    }();
  }
}

bool onednn_bf16_native() {
  const auto isa = dnnl_get_effective_cpu_isa();
  return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

}  // namespace detail
}  // namespace xgrad
