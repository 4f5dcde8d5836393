// Destructors never allocate or throw: a destructor that throws calls std::terminate, so freeing
// tensors, graphs and profiles must work when no memory is left. The array cache's lists get their
// room when buffers are taken (recycle only fills it), the node pool's list when it is made, ~Node
// frees a graph through a stack linked in the nodes themselves, and a Profile never stopped drops
// its events instead of collecting them. Checked by using up the memory under a cap in a fresh
// process (a death test), so that a violation fails this test and not the whole suite.
#include "address_space_limit.hpp"
#include "test_util.hpp"

#include <cstdlib>
#include <memory>
#include <vector>

#include <xgrad/backend/allocator.hpp>

using namespace xgrad;
using namespace xgrad::testing;

// The sanitizers' allocators abort on a failed allocation instead of throwing: plain build only.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

namespace {

// Takes every block malloc can still give under the cap: by halving sizes down to 4 KiB, then
// every size down to 8 bytes (glibc keeps freed small blocks in per-size lists), so that after
// take() any allocation fails. give() hands them back.
class UseUpMemory {
 public:
  UseUpMemory() { blocks_.reserve(std::size_t{1} << 20); }
  ~UseUpMemory() { give(); }
  void take() {
    for (std::size_t size = std::size_t{1} << 34; size > 4096; size /= 2) take_all(size);
    for (std::size_t size = 4096; size >= 8; size -= 8) take_all(size);
  }
  void give() {
    for (void* p : blocks_) std::free(p);
    blocks_.clear();
  }
  bool exhausted() const { return blocks_.size() < blocks_.capacity(); }

 private:
  void take_all(std::size_t size) {
    while (blocks_.size() < blocks_.capacity()) {
      void* p = std::malloc(size);
      if (p == nullptr) return;
      blocks_.push_back(p);
    }
  }
  std::vector<void*> blocks_;
};

// Builds a graph whose buffers go back to the array cache and whose nodes go back to the node
// pool when freed (a long chain, an input used twice, dropout's saved mask), and a profile that
// recorded it; uses up the memory; frees them all. Exits 0 when nothing threw (a throw in a
// destructor calls std::terminate: SIGABRT).
void free_everything_without_memory() {
  set_array_cache(true);
  auto profile = std::make_unique<profiler::Profile>();
  Tensor<float> x = randn<float>({1000}, /*requires_grad=*/true);
  auto y = std::make_unique<Tensor<float>>(x);
  for (int i = 0; i < 100; ++i) *y = exp(*y * 0.5f) * *y;
  *y = dropout(*y * *y, 0.5, /*training=*/true);
  UseUpMemory memory;
  AddressSpaceLimit limit(0);
  limit.apply();
  memory.take();
  if (!memory.exhausted()) std::_Exit(2);  // the cap did not hold: nothing was shown
  y.reset();                               // ~Node: 300 nodes, their values, the mask
  profile.reset();                         // ~Profile of a profile still recording
  x = Tensor<float>();
  memory.give();
  limit.lift();
  std::_Exit(0);
}

}  // namespace

TEST(Destructors, FreeTensorsGraphsAndProfilesWithNoMemoryLeft) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process, with only this test's state
  EXPECT_EXIT(free_everything_without_memory(), ::testing::ExitedWithCode(0), "");
}

#endif
