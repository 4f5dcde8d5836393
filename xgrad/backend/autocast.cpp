// The per-thread autocast state behind AutocastGuard and its cast cache (autocast.hpp).
#include <xgrad/backend/autocast.hpp>

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

}  // namespace

bool is_autocast_enabled() { return autocast_enabled; }
void set_autocast_enabled(bool enabled) { autocast_enabled = enabled; }

bool is_autocast_cache_enabled() { return cache_enabled; }
void set_autocast_cache_enabled(bool enabled) { cache_enabled = enabled; }
void clear_autocast_cache() { cached_casts.clear(); }

AutocastGuard::AutocastGuard(bool enabled, std::optional<bool> cache)
    : previous_(is_autocast_enabled()), previous_cache_(is_autocast_cache_enabled()) {
  ++guard_depth;
  set_autocast_enabled(enabled);
  set_autocast_cache_enabled(cache.value_or(previous_cache_));
}

AutocastGuard::~AutocastGuard() {
  if (--guard_depth == 0) clear_autocast_cache();  // as torch on leaving the outermost autocast
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
  // The same control block as owner's (which our weak_ptr keeps from being reused): the same tensor.
  const bool same_owner = !entry.owner.owner_before(owner) && !owner.owner_before(entry.owner);
  const bool hit =
      same_owner && entry.version == version && entry.src == src && entry.bits.rows == rows && entry.bits.cols == cols;
  if (!hit) entry = CachedCast{owner, version, src, to_bf16(src, rows, cols, cols)};
  return entry.bits;
}

std::size_t autocast_cache_size() { return cached_casts.size(); }

}  // namespace detail
}  // namespace xgrad
