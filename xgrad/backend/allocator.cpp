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
// Per count: how many Arrays of it this thread took from empty_array and has not handed back
// (`out`, at least 0: a buffer made elsewhere does not count) and the most that were out at once
// (`peak`). A freed buffer is kept while kept + out stays within peak -- a step that frees what it
// allocates finds every buffer it needs the next time, and no count keeps more than it ever used
// at once -- and while the cache's bytes stay within bound(): twice the most bytes this thread
// had out at once (the live high-water mark), at least kArrayCacheBytes. recycle runs in
// destructors (~Node), so it never allocates: take_cached reserves each count's list for its peak,
// and recycle keeps a buffer only within that room (else frees it).
template <class T>
struct ArrayCache {
  struct Size {
    std::vector<Array<T>> free;
    std::size_t out = 0, peak = 0;
  };
  std::unordered_map<std::size_t, Size> sizes;
  std::size_t bytes = 0, blocks = 0;
  std::size_t live = 0, high_water = 0;  // bytes out: the sum of out * count * sizeof(T)
  std::uint64_t hits = 0, misses = 0;

  std::size_t bound() const { return 2 * std::max(high_water, kArrayCacheBytes); }

  void clear() {
    for (auto& [n, size] : sizes) size.free.clear();
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
    s.live_bytes = c->f.live + c->d.live;
    s.high_water_bytes = c->f.high_water + c->d.high_water;
    s.bound_bytes = c->f.bound() + c->d.bound();
  }
  return s;
}

namespace detail {

namespace {
// Room for `n` cached buffers, at least doubling (a count whose peak creeps up does not reserve at
// every step). Without the memory it stays as it is: recycle then frees what does not fit.
template <class T>
void reserve_room(std::vector<Array<T>>& free, std::size_t n) {
  try {
    free.reserve(std::max(n, 2 * free.capacity()));
  } catch (const std::bad_alloc&) {
  }
}
}  // namespace

template <class T>
Array<T> take_cached(std::size_t numel) {
  ThreadCaches* caches = thread_caches();
  if (caches == nullptr) return no_array<T>();
  ArrayCache<T>& c = of<T>(*caches);
  if (!array_cache_enabled()) {
    if (c.blocks != 0) c.clear();
    return no_array<T>();
  }
  const std::size_t b = numel * sizeof(T);
  typename ArrayCache<T>::Size& size = c.sizes[numel];
  size.peak = std::max(size.peak, ++size.out);
  if (size.free.capacity() < size.peak) reserve_room(size.free, size.peak);
  c.live += b;
  c.high_water = std::max(c.high_water, c.live);
  if (size.free.empty()) {
    ++c.misses;  // the caller allocates
    return no_array<T>();
  }
  Array<T> a = std::move(size.free.back());
  size.free.pop_back();
  c.bytes -= b;
  --c.blocks;
  ++c.hits;
  return a;
}

template <class T>
void recycle(Array<T>& a, bool reset) {
  const std::size_t n = a.size(), bytes = n * sizeof(T);
  if (n == 0) return;  // no buffer
  if (ThreadCaches* caches = thread_caches()) {
    ArrayCache<T>& c = of<T>(*caches);
    if (!array_cache_enabled()) {
      if (c.blocks != 0) c.clear();
    } else {
      const auto it = c.sizes.find(n);
      if (it != c.sizes.end()) {  // a count this thread takes: else the buffer is freed
        typename ArrayCache<T>::Size& size = it->second;
        if (size.out > 0) {
          --size.out;
          c.live -= bytes;
        }
        if (size.free.size() + size.out < size.peak && size.free.size() < size.free.capacity() &&
            c.bytes + bytes <= c.bound()) {
          size.free.push_back(std::move(a));  // within the room take_cached reserved: no allocation
          c.bytes += bytes;
          ++c.blocks;
        } else if (size.out == 0 && size.free.empty()) {
          c.sizes.erase(it);  // nothing of that count held: forget it (shapes that keep changing)
        }
      }
    }
  }
  if (reset) a = no_array<T>();  // frees the buffer unless the cache took it
}

bool release_array_cache() {
  ThreadCaches* c = thread_caches();
  if (c == nullptr || c->f.blocks + c->d.blocks == 0) return false;
  c->f.clear();
  c->d.clear();
  return true;
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
