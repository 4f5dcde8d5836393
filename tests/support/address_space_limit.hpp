// AddressSpaceLimit: from apply() until it is destroyed, the process's address space is limited to
// what it maps at apply() plus `headroom` bytes, so that an allocation larger than that cannot be
// had, on any machine. The sanitizers map terabytes and abort on a failed allocation instead of
// throwing: the tests that use it are plain-build only.
//
// Nothing else may map memory meanwhile: OpenBLAS starts its server threads when it is loaded, and
// each maps a 128 MiB buffer when it first runs -- on a loaded machine, after apply() (a test that
// left 48 MiB of room then failed 2 times in 100 under load). apply() first stops those threads
// (blas_thread_shutdown_ joins them; xgrad runs OpenBLAS on one thread, and a later threaded call
// would start them again), so the room it leaves is the test's own.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <new>
#include <string>

#include <xgrad/xgrad.hpp>

extern "C" int blas_thread_shutdown_(void) __attribute__((weak));  // OpenBLAS's; null with another BLAS

namespace xgrad::testing {

class AddressSpaceLimit {
 public:
  explicit AddressSpaceLimit(std::size_t headroom = std::size_t{16} << 20) : headroom_(headroom) {
    ::getrlimit(RLIMIT_AS, &old_);
  }
  ~AddressSpaceLimit() { ::setrlimit(RLIMIT_AS, &old_); }
  AddressSpaceLimit(const AddressSpaceLimit&) = delete;
  AddressSpaceLimit& operator=(const AddressSpaceLimit&) = delete;

  void apply() {
    if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
    long pages = 0;
    FILE* statm = std::fopen("/proc/self/statm", "r");
    ASSERT_NE(statm, nullptr);
    ASSERT_EQ(std::fscanf(statm, "%ld", &pages), 1);
    std::fclose(statm);
    rlimit tight = old_;
    tight.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + headroom_;
    ASSERT_EQ(::setrlimit(RLIMIT_AS, &tight), 0);
  }
  // Gives the limit of before apply() back now.
  void lift() { ::setrlimit(RLIMIT_AS, &old_); }

 private:
  rlimit old_{};
  std::size_t headroom_;
};

// What f throws under a limit: the message of an OutOfMemoryError, or what else came. The array
// cache is off meanwhile (and its buffers freed): a cached buffer would serve the allocation the
// limit refuses.
template <class Fn>
std::string out_of_memory_of(Fn&& f) {
  struct CacheOff {
    const bool was = array_cache_enabled();
    CacheOff() { set_array_cache(false); }
    ~CacheOff() { set_array_cache(was); }
  } const cache_off;
  try {
    f();
  } catch (const OutOfMemoryError& e) {
    return e.what();
  } catch (const std::bad_alloc& e) {
    return std::string("a bare std::bad_alloc: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("another error: ") + e.what();
  }
  return "no error";
}

}  // namespace xgrad::testing
