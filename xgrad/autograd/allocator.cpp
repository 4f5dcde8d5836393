#include <xgrad/autograd/allocator.hpp>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>

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

}  // namespace xgrad
