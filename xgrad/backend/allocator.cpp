#include <xgrad/backend/allocator.hpp>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include <xgrad/backend/array.hpp>
#include <xgrad/backend/parallel_loops.hpp>

#if defined(__SANITIZE_ADDRESS__)
#define XGRAD_ARRAY_CACHE_POSSIBLE 0  // keep ASan's use-after-free detection on tensor buffers
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XGRAD_ARRAY_CACHE_POSSIBLE 0
#endif
#endif
#ifndef XGRAD_ARRAY_CACHE_POSSIBLE
#define XGRAD_ARRAY_CACHE_POSSIBLE 1
#endif

#if defined(__GLIBC__)  // defined by the C library's headers above
#include <malloc.h>
#endif

namespace xgrad {

namespace {
std::atomic<bool> g_tuned{false};
}  // namespace

bool set_allocator_tuning(bool enabled) {
#if defined(__GLIBC__)
  constexpr int kKeep = 32 << 20;       // glibc's largest mmap threshold
  constexpr int kDefault = 128 << 10;   // glibc's initial mmap and trim thresholds
  const int mmap_threshold = enabled ? kKeep : kDefault;
  const int trim_threshold = enabled ? INT_MAX : kDefault;  // INT_MAX: never trim
  const bool ok = mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1 && mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1;
  g_tuned = enabled && ok;
  return ok;
#else
  (void)enabled;
  return false;
#endif
}

bool allocator_tuning() { return g_tuned; }

bool allocator_tuning_from_env() {
  const char* env = std::getenv("XGRAD_MALLOC_TUNING");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  set_allocator_tuning(true);
  return allocator_tuning();
}

// ---- the array cache ---------------------------------------------------------------------

namespace {

bool array_cache_default() {
  if (!XGRAD_ARRAY_CACHE_POSSIBLE) return false;
  const char* env = std::getenv("XGRAD_ARRAY_CACHE");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

std::atomic<bool> g_array_cache{array_cache_default()};

// One thread's freed buffers of one element type, by exact element count, most recent last.
template <class T>
struct ArrayCache {
  std::unordered_map<std::size_t, std::vector<Array<T>>> free;
  std::size_t bytes = 0, blocks = 0;
  std::uint64_t hits = 0, misses = 0;

  void clear() {
    free.clear();
    bytes = blocks = 0;
  }
};

struct ThreadCaches {
  ArrayCache<float> f;
  ArrayCache<double> d;
  ~ThreadCaches();
};

// Trivially destructible, so it stays readable while the thread's (or the program's) other
// thread_local and static objects are destroyed: a Tensor freed then frees its buffer directly.
thread_local bool t_caches_gone = false;

ThreadCaches::~ThreadCaches() { t_caches_gone = true; }

ThreadCaches* thread_caches() {
  if (t_caches_gone) return nullptr;
  thread_local ThreadCaches caches;
  return &caches;
}

template <class T>
ArrayCache<T>& of(ThreadCaches& c) {
  if constexpr (std::is_same_v<T, float>) return c.f;
  else return c.d;
}

}  // namespace

void set_array_cache(bool enabled) {
  g_array_cache = enabled && XGRAD_ARRAY_CACHE_POSSIBLE;
  if (!g_array_cache)
    if (ThreadCaches* c = thread_caches()) {
      c->f.clear();
      c->d.clear();
    }
}

bool array_cache_enabled() { return g_array_cache.load(std::memory_order_relaxed); }

ArrayCacheStats array_cache_stats() {
  ArrayCacheStats s;
  if (ThreadCaches* c = thread_caches()) {
    s.cached_bytes = c->f.bytes + c->d.bytes;
    s.cached_blocks = c->f.blocks + c->d.blocks;
    s.hits = c->f.hits + c->d.hits;
    s.misses = c->f.misses + c->d.misses;
  }
  return s;
}

namespace detail {

template <class T>
Array<T> take_cached(std::size_t numel) {
  ThreadCaches* caches = thread_caches();
  if (caches == nullptr) return no_array<T>();
  ArrayCache<T>& c = of<T>(*caches);
  if (!array_cache_enabled()) {
    if (c.blocks != 0) c.clear();
    return no_array<T>();
  }
  auto it = c.free.find(numel);
  if (it == c.free.end() || it->second.empty()) {
    ++c.misses;
    return no_array<T>();
  }
  Array<T> a = std::move(it->second.back());
  it->second.pop_back();
  c.bytes -= numel * sizeof(T);
  --c.blocks;
  ++c.hits;
  return a;
}

template <class T>
void recycle(Array<T>& a, bool reset) {
  const std::size_t n = a.size(), bytes = n * sizeof(T);
  if (n == 0) return;  // no buffer
  ThreadCaches* caches = bytes > kArrayCacheBlockBytes ? nullptr : thread_caches();
  if (caches != nullptr) {
    ArrayCache<T>& c = of<T>(*caches);
    if (!array_cache_enabled()) {
      if (c.blocks != 0) c.clear();
    } else if (c.bytes + bytes <= kArrayCacheBytes) {
      std::vector<Array<T>>& list = c.free[n];
      if (list.size() < kArrayCacheBlocksPerSize) {
        if (list.capacity() == 0) list.reserve(kArrayCacheBlocksPerSize);
        list.push_back(std::move(a));
        c.bytes += bytes;
        ++c.blocks;
      }
    }
  }
  if (reset) a = no_array<T>();  // frees the buffer unless the cache took it
}

template <class T>
void fill_blocks(T* a, std::size_t n, T value) {
  parallel_blocks(n, [&](std::size_t i0, std::size_t i1) { std::fill(a + i0, a + i1, value); });
}

template <class T>
void copy_blocks(const T* src, std::size_t n, T* dst) {
  parallel_blocks(n, [&](std::size_t i0, std::size_t i1) { std::copy(src + i0, src + i1, dst + i0); });
}

template void fill_blocks<float>(float*, std::size_t, float);
template void fill_blocks<double>(double*, std::size_t, double);
template void copy_blocks<float>(const float*, std::size_t, float*);
template void copy_blocks<double>(const double*, std::size_t, double*);

template Array<float> take_cached<float>(std::size_t);
template Array<double> take_cached<double>(std::size_t);
template void recycle<float>(Array<float>&, bool);
template void recycle<double>(Array<double>&, bool);

}  // namespace detail

}  // namespace xgrad
