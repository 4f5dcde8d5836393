// set_allocator_tuning: the library leaves malloc alone until a program asks (ctest runs each
// test in a process of its own, so each starts from glibc's defaults).
#include <malloc.h>

#include <cstdlib>

#include <gtest/gtest.h>

#include <xgrad/xgrad.hpp>

namespace {

// Whether a block of `bytes` is served by mmap (glibc counts those in hblks).
bool served_by_mmap(std::size_t bytes) {
  const std::size_t before = mallinfo2().hblks;
  void* volatile p = std::malloc(bytes);  // volatile: the compiler may not drop the pair
  const bool mapped = mallinfo2().hblks > before;
  std::free(p);
  return mapped;
}

constexpr std::size_t kEightMiB = 8u << 20;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;  // ASan replaces malloc: neither mallopt nor mallinfo2 apply
#else
constexpr bool kSanitized = false;
#endif
#define SKIP_UNDER_ASAN() \
  if (kSanitized) GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc"

TEST(Allocator, LinkingXgradLeavesMallocAlone) {
  SKIP_UNDER_ASAN();
  xgrad::Tensor<float> t = xgrad::zeros<float>({4, 4});  // the library is linked and used
  EXPECT_FALSE(xgrad::allocator_tuning());
  EXPECT_TRUE(served_by_mmap(kEightMiB));  // glibc's default: large blocks go back to the kernel
}

TEST(Allocator, TuningKeepsLargeBlocksOnTheHeap) {
  SKIP_UNDER_ASAN();
  ASSERT_TRUE(xgrad::set_allocator_tuning(true));
  EXPECT_TRUE(xgrad::allocator_tuning());
  EXPECT_FALSE(served_by_mmap(kEightMiB));
  ASSERT_TRUE(xgrad::set_allocator_tuning(false));
  EXPECT_FALSE(xgrad::allocator_tuning());
  // The 8 MiB freed above stay at the top of the heap and would serve another 8 MiB; a larger
  // block shows that the default threshold is back.
  EXPECT_TRUE(served_by_mmap(2 * kEightMiB));
}

TEST(Allocator, EnvironmentCanTurnTheExamplesTuningOff) {
  SKIP_UNDER_ASAN();
  xgrad::set_allocator_tuning(false);
  setenv("XGRAD_MALLOC_TUNING", "0", 1);
  EXPECT_FALSE(xgrad::allocator_tuning_from_env());
  EXPECT_FALSE(xgrad::allocator_tuning());
  unsetenv("XGRAD_MALLOC_TUNING");
  EXPECT_TRUE(xgrad::allocator_tuning_from_env());
  EXPECT_TRUE(xgrad::allocator_tuning());
  xgrad::set_allocator_tuning(false);
}

}  // namespace
