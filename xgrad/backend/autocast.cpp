// The per-thread autocast state behind AutocastGuard and its cast cache (autocast.hpp).
#include <xgrad/backend/autocast.hpp>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>

namespace xgrad {

namespace {

thread_local bool autocast_enabled = false;
thread_local bool cache_enabled = true;
thread_local int guard_depth = 0;  // the AutocastGuards alive on this thread

// One cached cast: the owner it was made from (weakly: a freed owner's entry is never a hit) and
// what identified its value then.
struct CachedCast {
  std::weak_ptr<const void> owner;
  std::uint64_t version = 0;
  const float* src = nullptr;
  detail::Bf16Matrix bits;
};
// Keyed by the owner's address; the weak_ptr tells a live owner from a freed one whose address
// came back.
thread_local std::unordered_map<const void*, CachedCast> cached_casts;

// Whether entry holds the cast of owner at version, src and shape: the same control block as
// owner's (which entry's weak_ptr keeps from being reused) is the same tensor.
bool is_hit(const CachedCast& entry, const std::shared_ptr<const void>& owner, std::uint64_t version, const float* src,
            std::size_t rows, std::size_t cols) {
  const bool same_owner = !entry.owner.owner_before(owner) && !owner.owner_before(entry.owner);
  return same_owner && entry.version == version && entry.src == src && entry.bits.rows == rows &&
         entry.bits.cols == cols;
}

std::size_t bytes_of(const detail::Bf16Matrix& m) { return m.rows * m.cols * sizeof(std::uint16_t); }

// The frozen-weight cache (autocast.hpp): one for the process, since a weight is shared by the
// threads that use it and dies on any of them. An entry goes when its tensor's node dies
// (autocast_forget, called by ~Node<float>), so it never outlives the weight.
struct FrozenCasts {
  std::mutex mutex;
  std::unordered_map<const void*, CachedCast> entries;
  std::size_t bytes = 0;
};
// entries.size(), written under the lock and read without it by ~Node's fast path: constant
// initialized, so that a node dying before any cast (or after this file's statics) finds 0 and
// neither allocates nor touches the cache.
std::atomic<std::size_t> frozen_count{0};
// Never destroyed: a tensor in a static object may die after this file's statics, and its ~Node
// still looks here (the pointer stays reachable, so it is no leak to LeakSanitizer).
FrozenCasts& frozen_casts() {
  static FrozenCasts* casts = new FrozenCasts;
  return *casts;
}
void count_frozen(const FrozenCasts& frozen) { frozen_count.store(frozen.entries.size(), std::memory_order_relaxed); }

}  // namespace

bool is_autocast_enabled() { return autocast_enabled; }
void set_autocast_enabled(bool enabled) { autocast_enabled = enabled; }

bool is_autocast_cache_enabled() { return cache_enabled; }
void set_autocast_cache_enabled(bool enabled) { cache_enabled = enabled; }
void clear_autocast_cache() {
  cached_casts.clear();
  FrozenCasts& frozen = frozen_casts();
  const std::lock_guard<std::mutex> lock(frozen.mutex);
  frozen.entries.clear();
  frozen.bytes = 0;
  count_frozen(frozen);
}

std::size_t autocast_frozen_cache_bytes() {
  FrozenCasts& frozen = frozen_casts();
  const std::lock_guard<std::mutex> lock(frozen.mutex);
  return frozen.bytes;
}

AutocastGuard::AutocastGuard(bool enabled, std::optional<bool> cache)
    : previous_(is_autocast_enabled()), previous_cache_(is_autocast_cache_enabled()) {
  ++guard_depth;
  set_autocast_enabled(enabled);
  set_autocast_cache_enabled(cache.value_or(previous_cache_));
}

AutocastGuard::~AutocastGuard() {
  if (--guard_depth == 0) cached_casts.clear();  // as torch on leaving the outermost autocast (frozen casts stay)
  set_autocast_enabled(previous_);
  set_autocast_cache_enabled(previous_cache_);
}

const char* autocast_gemm_path() { return detail::bf16_gemm_path(); }

namespace detail {

Bf16Matrix autocast_cached_bf16(const std::shared_ptr<const void>& owner, std::uint64_t version, const float* src,
                                std::size_t rows, std::size_t cols) {
  // Outside every guard nothing would empty the cache: cast without it.
  if (!cache_enabled || guard_depth == 0 || owner == nullptr) return to_bf16(src, rows, cols, cols);
  CachedCast& entry = cached_casts[owner.get()];
  if (!is_hit(entry, owner, version, src, rows, cols)) {
    entry = CachedCast{owner, version, src, to_bf16(src, rows, cols, cols)};
    autocast_forget(owner.get());  // a weight unfrozen: its frozen cast is stale from now on
  }
  return entry.bits;
}

Bf16Matrix autocast_frozen_bf16(const std::shared_ptr<const void>& owner, std::uint64_t version, const float* src,
                                std::size_t rows, std::size_t cols) {
  if (!cache_enabled || owner == nullptr) return to_bf16(src, rows, cols, cols);
  FrozenCasts& frozen = frozen_casts();
  {
    const std::lock_guard<std::mutex> lock(frozen.mutex);
    const auto it = frozen.entries.find(owner.get());
    if (it != frozen.entries.end() && is_hit(it->second, owner, version, src, rows, cols)) return it->second.bits;
  }
  // Cast without the lock (to_bf16 runs on the pool; other threads may look up meanwhile).
  Bf16Matrix bits = to_bf16(src, rows, cols, cols);
  const std::lock_guard<std::mutex> lock(frozen.mutex);
  CachedCast& entry = frozen.entries[owner.get()];
  frozen.bytes += bytes_of(bits);
  frozen.bytes -= bytes_of(entry.bits);  // a new version replaces the old cast (or an empty entry)
  entry = CachedCast{owner, version, src, bits};
  count_frozen(frozen);
  return bits;
}

void autocast_forget(const void* node) noexcept {
  if (frozen_count.load(std::memory_order_relaxed) == 0) return;  // the common case: nothing frozen cached
  FrozenCasts& frozen = frozen_casts();
  const std::lock_guard<std::mutex> lock(frozen.mutex);
  const auto it = frozen.entries.find(node);
  if (it == frozen.entries.end()) return;
  frozen.bytes -= bytes_of(it->second.bits);
  frozen.entries.erase(it);
  count_frozen(frozen);
}

std::size_t autocast_cache_size() { return cached_casts.size(); }

std::size_t autocast_frozen_cache_size() {
  FrozenCasts& frozen = frozen_casts();
  const std::lock_guard<std::mutex> lock(frozen.mutex);
  return frozen.entries.size();
}

}  // namespace detail
}  // namespace xgrad
