// The autograd core's own cost, with almost no arithmetic: y = y * 1.0001f, --ops times on a
// (16) float tensor that requires grad, then sum(y).backward(). Per round: microseconds per op of
// the forward, of the backward and of both, in this thread's CPU time (steadier than the wall
// clock on a loaded machine: time spent descheduled is not counted) and, for the total, in wall
// time; the median and the minimum over --rounds rounds. Then
// the graph's memory per op: the heap bytes still held after the forward (the node, the result's
// tensor and value, the saved input), with the node pools and the array cache off so that every
// object is its own allocation, divided by the op count.
//   bench_autograd_chain --ops 4000 --rounds 30
// The program reads only the public API, so the same file builds against an older core to compare.
#include <xgrad/xgrad.hpp>

#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "bench_util.hpp"

namespace {

// Live heap bytes (malloc_usable_size of each block), counted by the replaced operator new/delete
// while `counting` (only around the memory measurement: the timed rounds pay nothing for it).
std::atomic<bool> counting{false};
std::atomic<long long> live_bytes{0};

void* counted_new(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  if (counting.load(std::memory_order_relaxed)) live_bytes += static_cast<long long>(malloc_usable_size(p));
  return p;
}
void counted_delete(void* p) noexcept {
  if (p == nullptr) return;
  if (counting.load(std::memory_order_relaxed)) live_bytes -= static_cast<long long>(malloc_usable_size(p));
  std::free(p);
}

// This thread's CPU time, seconds.
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

using xgrad::Tensor;

// The chain's result: y = x * 1.0001f^ops, through ops nodes.
Tensor<float> chain(const Tensor<float>& x, int ops) {
  Tensor<float> y = x;
  for (int i = 0; i < ops; ++i) y = y * 1.0001f;
  return y;
}

struct Times {
  double forward_us, backward_us, wall_us;  // per op
};

Times one_round(Tensor<float>& x, int ops) {
  x.zero_grad();
  const auto wall0 = std::chrono::steady_clock::now();
  const double t0 = thread_seconds();
  Tensor<float> loss = xgrad::sum(chain(x, ops));
  const double t1 = thread_seconds();
  loss.backward();
  loss = Tensor<float>();  // frees the (released) graph: part of the backward's cost
  const double t2 = thread_seconds();
  return {(t1 - t0) * 1e6 / ops, (t2 - t1) * 1e6 / ops, xgrad::bench::seconds_since(wall0) * 1e6 / ops};
}

// Heap bytes per op that the graph of the chain holds after its forward, every cache off.
double graph_bytes_per_op(const Tensor<float>& x, int ops) {
  const bool cache = xgrad::array_cache_enabled();
  xgrad::set_array_cache(false);
  counting = true;
  const long long before = live_bytes;
  double per_op = 0;
  {
    Tensor<float> y = chain(x, ops);
    per_op = static_cast<double>(live_bytes - before) / ops;
  }
  counting = false;
  xgrad::set_array_cache(cache);
  return per_op;
}

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_delete(p); }

int main(int argc, char** argv) {
  int ops = 4000, rounds = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--ops" && value > 0) {
      ops = value;
    } else if (flag == "--rounds" && value > 0) {
      rounds = value;
    } else {
      std::fprintf(stderr, "bench_autograd_chain: unknown flag or bad value \"%s %s\"; expected --ops N, --rounds N\n",
                   argv[i], argv[i + 1]);
      return 2;
    }
  }
  Tensor<float> x = xgrad::ones<float>({16}, true);
  for (int i = 0; i < 3; ++i) one_round(x, ops);  // warm the pools and the array cache
  std::vector<double> fw, bw, both, wall;
  for (int r = 0; r < rounds; ++r) {
    const Times t = one_round(x, ops);
    fw.push_back(t.forward_us);
    bw.push_back(t.backward_us);
    both.push_back(t.forward_us + t.backward_us);
    wall.push_back(t.wall_us);
  }
  using xgrad::bench::median;
  std::printf(
      "chain of %d ops, %d rounds, us/op median (min): cpu forward %.4f (%.4f) backward %.4f (%.4f) "
      "total %.4f (%.4f)  wall total %.4f (%.4f)  graph bytes/op %.0f\n",
      ops, rounds, median(fw), minimum(fw), median(bw), minimum(bw), median(both), minimum(both), median(wall),
      minimum(wall), graph_bytes_per_op(x, ops));
  return 0;
}
