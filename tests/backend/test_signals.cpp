// Signal storms: a timer fires every 20-100 us into a caught handler (one that uses its stack, as
// real ones do) while gemms of every shape class and path (OpenBLAS under 2^14 multiply-adds, one
// oneDNN call, the pool's row split; transposed operands; batched), linear + GELU, causal
// attention, forward and backward, float32 and bf16 autocast, and whole training steps run on 1
// and 2 threads. Nothing may abort, and every result must be bit-identical to a run without
// signals. oneDNN's jit gemm kernels move the stack pointer into the heap while they run; a
// signal handled on that thread used to corrupt the heap within seconds.
#include <signal.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/backend/signals.hpp>
#include <xgrad/nn/kv_cache.hpp>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

std::atomic<long> g_signals{0};

void on_signal(int) {
  volatile char scratch[1024];  // a handler frame that reaches down the stack
  for (int i = 0; i < 1024; i += 64) scratch[i] = static_cast<char>(i);
  static_cast<void>(scratch[512]);
  g_signals.fetch_add(1, std::memory_order_relaxed);
}

// While it lives, SIGALRM arrives every `period_us` microseconds (ITIMER_REAL: process-directed,
// so the kernel delivers it to any thread that does not block it) into on_signal.
class SignalStorm {
 public:
  explicit SignalStorm(long period_us) {
    struct sigaction action {};
    action.sa_handler = on_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(SIGALRM, &action, &previous_);
    const itimerval timer{{0, period_us}, {0, period_us}};
    setitimer(ITIMER_REAL, &timer, nullptr);
  }
  ~SignalStorm() {
    const itimerval off{};
    setitimer(ITIMER_REAL, &off, nullptr);
    sigaction(SIGALRM, &previous_, nullptr);
  }

 private:
  struct sigaction previous_ {};
};

// Every value and gradient a workload produced, as one float vector.
using Results = std::vector<float>;
void append(Results& out, const Array<float>& a) { out.insert(out.end(), a.data(), a.data() + a.size()); }

Tensor<float> seeded(const Shape& shape, std::uint64_t seed, bool requires_grad = false) {
  Generator generator(seed);
  return randn<float>(shape, generator, requires_grad);
}

// Products of each shape class: (m, n, k) = 4^3 (OpenBLAS), 32^3 (one oneDNN call), 256^3 (the
// pool's row split); transposed operands; a batch of 4; forward and backward.
Results gemms() {
  Results out;
  for (std::size_t size : {4, 32, 256}) {
    Tensor<float> a = seeded({size, size}, size, true), b = seeded({size, size}, size + 1, true);
    Tensor<float> c = matmul(a, b) + matmul(transpose(a, 0, 1), b) + matmul(a, transpose(b, 0, 1));
    sum(c * c).backward();
    append(out, c.value());
    append(out, a.grad());
    append(out, b.grad());
  }
  Tensor<float> a = seeded({4, 64, 48}, 7, true), b = seeded({48, 80}, 8, true);
  Tensor<float> c = matmul(a, b);
  sum(c * c).backward();
  append(out, c.value());
  append(out, a.grad());
  append(out, b.grad());
  return out;
}

// Linear + GELU, and causal attention, forward and backward.
Results layers() {
  Results out;
  Tensor<float> x = seeded({64, 128}, 11, true), w = seeded({256, 128}, 12, true), bias = seeded({256}, 13, true);
  Tensor<float> y = gelu(linear(x, w, bias));
  sum(y * y).backward();
  for (const Array<float>* a : {&y.value(), &x.grad(), &w.grad(), &bias.grad()}) append(out, *a);
  Tensor<float> q = seeded({2, 4, 96, 32}, 14, true), k = seeded({2, 4, 96, 32}, 15, true),
                v = seeded({2, 4, 96, 32}, 16, true);
  Tensor<float> o = scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  sum(o * o).backward();
  for (const Array<float>* a : {&o.value(), &q.grad(), &k.grad(), &v.grad()}) append(out, *a);
  return out;
}

// Three Adam steps of a 2-layer encoder, dropout on (its generator seeded): the parameters.
Results training_steps() {
  manual_seed(0);
  auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(
      nn::TransformerEncoderLayerOptions(64, 4).dim_feedforward(128).dropout(0.1).activation("gelu")
          .batch_first(true).norm_first(true));
  nn::TransformerEncoder<float> encoder(layer, 2);
  optim::Adam<float> opt(encoder.parameters(), optim::AdamOptions(1e-3));
  const Tensor<float> x = seeded({8, 32, 64}, 21), target = seeded({8, 32, 64}, 22);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    mse_loss(encoder.forward(x), target).backward();
    opt.step();
  }
  Results out;
  for (const auto& p : encoder.parameters()) append(out, p.value());
  return out;
}

Results everything(bool bf16) {
  AutocastGuard autocast(bf16);
  Results out = gemms();
  for (const Results& part : {layers(), training_steps()}) out.insert(out.end(), part.begin(), part.end());
  return out;
}

bool same_bits(const Results& a, const Results& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs everything(bf16) without signals, then again and again under storms of 20, 50 and 100 us
// for about `seconds` in all, on `threads` threads and each gemm backend: every run's results must
// be the same bits, and the handler must have run.
void storm_matches_quiet_run(int threads, bool bf16, double seconds) {
  const int previous_threads = get_num_threads();
  const GemmBackend previous_backend = get_gemm_backend();
  set_num_threads(threads);
  for (GemmBackend backend : {GemmBackend::onednn, GemmBackend::openblas}) {
    SCOPED_TRACE(gemm_backend_name(backend));
    set_gemm_backend(backend);
    const Results quiet = everything(bf16);
    const long before = g_signals.load();
    int runs = 0;
    const auto start = std::chrono::steady_clock::now();
    for (long period_us : {20, 50, 100}) {
      const SignalStorm storm(period_us);
      // A sixth of the time at 20 us, two at 50, three at 100; at least one run each.
      const double share = period_us == 20 ? 1 : period_us == 50 ? 3 : 6;
      const auto until = start + std::chrono::duration<double>(seconds * share / 6);
      do {
        ASSERT_TRUE(same_bits(everything(bf16), quiet)) << "a run under a " << period_us << " us storm differs";
        ++runs;
      } while (std::chrono::steady_clock::now() < until);
    }
    EXPECT_GT(g_signals.load() - before, 100) << "the storm did not reach the handler (" << runs << " runs)";
  }
  set_gemm_backend(previous_backend);
  set_num_threads(previous_threads);
}

}  // namespace

TEST(SignalStorm, Float32OneThread) { storm_matches_quiet_run(1, false, 1.0); }
TEST(SignalStorm, Float32TwoThreads) { storm_matches_quiet_run(2, false, 1.0); }
TEST(SignalStorm, Bf16AutocastOneThread) { storm_matches_quiet_run(1, true, 1.0); }
TEST(SignalStorm, Bf16AutocastTwoThreads) { storm_matches_quiet_run(2, true, 1.0); }

// The pool's workers block the asynchronous signals from their start, so a process-directed
// signal is handled on a thread of the user's; the caller's thread gets its mask back after each
// oneDNN call.
TEST(SignalStorm, PoolWorkersNeverRunTheHandlerAndTheCallersMaskIsRestored) {
  const int previous_threads = get_num_threads();
  set_num_threads(2);
  sigset_t before, after;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  static std::atomic<bool> on_worker{false};
  struct sigaction action {}, previous {};
  // A pool worker is a thread other than the main one (gtest's, whose id is the pid) that is
  // always in a parallel region. (OpenBLAS's idle threads, started when it loads, may run it.)
  action.sa_handler = [](int) {
    if (detail::in_parallel_region() && syscall(SYS_gettid) != getpid()) on_worker.store(true);
  };
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &action, &previous);
  const itimerval timer{{0, 20}, {0, 20}}, off{};
  setitimer(ITIMER_REAL, &timer, nullptr);
  Tensor<float> a = seeded({512, 512}, 1), b = seeded({512, 512}, 2);
  for (int i = 0; i < 20; ++i) matmul(a, b);
  setitimer(ITIMER_REAL, &off, nullptr);
  sigaction(SIGALRM, &previous, nullptr);
  pthread_sigmask(SIG_SETMASK, nullptr, &after);
  EXPECT_FALSE(on_worker.load()) << "a pool worker ran a signal handler";
  EXPECT_EQ(sigismember(&after, SIGALRM), sigismember(&before, SIGALRM));
  EXPECT_EQ(sigismember(&after, SIGINT), sigismember(&before, SIGINT));
  set_num_threads(previous_threads);
}

// A transformer layer's forward blocks the signals once on its thread, however many oneDNN calls
// it makes (it runs as one BackendBatch, backend/batch.hpp), and so does the KV cache's forward
// through the same layer structure; a lone oneDNN-sized linear blocks them once too.
TEST(SignalBlock, OnePairPerLayerForward) {
  const int previous_threads = get_num_threads();
  const GemmBackend previous_backend = get_gemm_backend();
  set_num_threads(1);
  set_gemm_backend(GemmBackend::onednn);
  const auto pairs = [](const std::function<void()>& f) {
    const std::uint64_t before = detail::async_signal_blocks_on_this_thread();
    f();
    return detail::async_signal_blocks_on_this_thread() - before;
  };
  manual_seed(0);
  for (const bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "pre-norm" : "post-norm");
    auto options = nn::TransformerEncoderLayerOptions(64, 4).dim_feedforward(256).dropout(0.0).batch_first(true);
    nn::TransformerEncoderLayer<float> layer(options.norm_first(norm_first));
    // (2, 16, 64): the in-projection and both feed-forward products are 2^18.6 to 2^19
    // multiply-adds, one oneDNN call each on this thread
    const Tensor<float> x = seeded({2, 16, 64}, 1);
    EXPECT_EQ(pairs([&] { linear(x, layer.linear1->weight, layer.linear1->bias); }), 1u);
    EXPECT_EQ(pairs([&] { layer.forward(x, {}, {}, /*is_causal=*/true); }), 1u);
    const NoGradGuard no_grad;
    nn::KVCache<float> cache;
    EXPECT_EQ(pairs([&] { nn::forward_cached(layer, x, cache); }), 1u);
  }
  set_gemm_backend(previous_backend);
  set_num_threads(previous_threads);
}

// The signal block is the backend's business: no source outside xgrad/backend/ names it (code
// above asks for a BackendBatch). The engine's backward pass still opens its scope by name.
TEST(SignalBlock, NamedOnlyInTheBackend) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(XGRAD_SOURCE_DIR) / "xgrad";
  std::vector<std::string> offenders;
  std::size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    const fs::path relative = fs::relative(entry.path(), root);
    if (*relative.begin() == "backend" || relative == fs::path("core/engine.cpp")) continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ++files;
    for (const char* name : {"backend/signals.hpp", "AsyncSignalScope", "AsyncSignalBlock", "block_async_signals"})
      if (text.find(name) != std::string::npos) offenders.push_back(relative.string() + " names " + name);
  }
  EXPECT_GT(files, 50u) << "the sources were not found under " << root;
  EXPECT_TRUE(offenders.empty()) << ::testing::PrintToString(offenders);
}
