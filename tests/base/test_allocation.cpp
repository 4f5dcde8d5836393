// The one allocation path (empty_array, backend/array.hpp): a real allocation failure in any op,
// forward or backward, is an OutOfMemoryError naming the op, the shape and the bytes; sizes that
// overflow are refused before anything is allocated; and no library source allocates an array
// any other way.
#include "address_space_limit.hpp"
#include "test_util.hpp"

#include <xgrad/backend/allocator.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <string>
#include <vector>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

using F32 = Tensor<float>;

// The class stays closed: outside array.hpp no library source calls from_shape, an allocating
// xtensor factory, or computes an allocation size as sizeof(T) * n.
TEST(Allocation, EveryArrayOfTheLibraryIsAllocatedThroughEmptyArray) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(XGRAD_SOURCE_DIR) / "xgrad";
  const std::vector<std::string> forbidden = {"::from_shape(",  "xt::zeros<",      "xt::ones<",      "xt::empty<",
                                              "xt::full_like(", "xt::zeros_like(", "xt::ones_like(", "xt::arange<",
                                              "sizeof(T) *",    "sizeof(T)*"};
  std::size_t files = 0;
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp")) continue;
    const std::string rel = fs::relative(entry.path(), root).generic_string();
    if (rel == "backend/array.hpp") continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      for (const std::string& f : forbidden)
        if (line.find(f) != std::string::npos) found.push_back("xgrad/" + rel + ":" + std::to_string(n) + ": " + line);
  }
  EXPECT_GT(files, 50u);
  for (const std::string& f : found) ADD_FAILURE() << "allocates outside empty_array: " << f;
}

TEST(Allocation, CheckedAddAndMulNameTheirArguments) {
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(checked_add<std::int64_t>(max - 1, 1, "op", "n"), max);
  EXPECT_EQ(checked_mul<std::size_t>(std::size_t{1} << 31, std::size_t{1} << 31, "op", "n"), std::size_t{1} << 62);
  XGRAD_EXPECT_THROW_MSG(checked_add<std::int64_t>(max, 1, "op", "the length"),
                         "op: the length overflows (9223372036854775807 + 1)");
  XGRAD_EXPECT_THROW_MSG(checked_mul<std::size_t>(std::size_t{1} << 32, std::size_t{1} << 32, "op", "the count"),
                         "op: the count overflows (4294967296 * 4294967296)");
}

// len(BatchSampler) computed (n + batch_size - 1) / batch_size, which wrapped for a huge batch size.
TEST(Allocation, BatchSamplerSizeWithAHugeBatchSize) {
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  data::BatchSampler keep(std::make_shared<data::SequentialSampler>(10), huge, /*drop_last=*/false);
  EXPECT_EQ(keep.size(), 1u);
  ASSERT_EQ(keep.batches().size(), 1u);
  EXPECT_EQ(keep.batches()[0].size(), 10u);
  data::BatchSampler drop(std::make_shared<data::SequentialSampler>(10), huge, /*drop_last=*/true);
  EXPECT_EQ(drop.size(), 0u);
  EXPECT_EQ(drop.batches().size(), 0u);
  EXPECT_EQ(data::BatchSampler(std::make_shared<data::SequentialSampler>(10), 3, false).size(), 4u);
  EXPECT_EQ(data::BatchSampler(std::make_shared<data::SequentialSampler>(9), 3, false).size(), 3u);
}

TEST(Allocation, IndexAndMaskArraysAreCheckedToo) {
  XGRAD_EXPECT_THROW_MSG(empty_array<std::int64_t>({std::size_t{1} << 61}, "argmax"),
                         "argmax: the shape (2305843009213693952) has 2305843009213693952 elements of 8 bytes");
  XGRAD_EXPECT_THROW_MSG(empty_array<bool>({std::size_t{1} << 32, std::size_t{1} << 32}, "mask"),
                         "mask: the shape (4294967296, 4294967296) has too many elements");
  const BoolArray m = full_array<bool>({2, 3}, true, "mask");
  EXPECT_EQ(m.shape(0), 2u);
  for (bool b : m) EXPECT_TRUE(b);
  const IndexArray i = full_array<std::int64_t>({4}, std::int64_t{7}, "index");
  EXPECT_EQ(copy_array(i, "copy")(3), 7);
}

// The sanitizers' allocators abort on a failed allocation instead of throwing: plain build only.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

using xgrad::testing::AddressSpaceLimit;

using xgrad::testing::out_of_memory_of;

#define EXPECT_MESSAGE_HAS(message, ...)                                                          \
  do {                                                                                            \
    const std::string m_ = (message);                                                             \
    for (const char* part : {__VA_ARGS__})                                                        \
      EXPECT_NE(m_.find(part), std::string::npos) << "\"" << m_ << "\" lacks \"" << part << "\""; \
  } while (0)

// The statement run under the limit.
#define EXPECT_OOM(statement, ...)               \
  EXPECT_MESSAGE_HAS(out_of_memory_of([&] {      \
                       AddressSpaceLimit limit_; \
                       limit_.apply();           \
                       statement;                \
                     }),                         \
                     __VA_ARGS__)

// root.backward() with the limit applied when the gradient reaches `at` (computed, before its
// op's backward runs): what that backward allocates cannot be had.
template <class T>
std::string backward_failure_at(Tensor<T> at, const Tensor<T>& root) {
  AddressSpaceLimit limit;
  at.register_hook([&limit](const Array<T>&) { limit.apply(); });
  return out_of_memory_of([&] { root.backward(); });
}

// (512, 16384) floats: 32 MiB.
constexpr std::size_t kRows = 512, kCols = 16384;
#define BIG "(512, 16384): tried to allocate 33554432 bytes"

TEST(Allocation, ARealAllocationFailureInAnyOpNamesTheOpTheShapeAndTheBytes) {
  const F32 x = ones<float>({kRows, kCols}), y = ones<float>({kRows, kCols});
  const F32 w = ones<float>({kCols}), b = zeros<float>({kCols});
  (void)sum(gelu(x));  // the thread pool started before any limit
  EXPECT_OOM(add(x, y), "add: not enough memory for a tensor of shape " BIG, "(0.03125 GiB)");
  EXPECT_OOM(mul(x, y), "mul: not enough memory for a tensor of shape " BIG);
  EXPECT_OOM(add(x, w), "add: not enough memory for a tensor of shape " BIG);  // broadcast
  EXPECT_OOM(mul(x, 2.0f), "mul: not enough memory for a tensor of shape " BIG);
  EXPECT_OOM(exp(x), "exp: not enough memory for a tensor of shape " BIG);
  EXPECT_OOM(gelu(x), "gelu: not enough memory for a tensor of shape " BIG);
  EXPECT_OOM(dropout(x, 0.5, true), "dropout: not enough memory for a tensor of shape " BIG);
  EXPECT_OOM(sort(x, -1),
             "sort: not enough memory for a tensor of shape (512, 16384): tried to allocate "
             "67108864 bytes");  // its indices, int64
  EXPECT_OOM(softmax(x, -1), "softmax: not enough memory for a tensor of shape " BIG);
  EXPECT_OOM(layer_norm(x, {kCols}, w, b), "layer_norm: not enough memory for a tensor of shape " BIG);
  EXPECT_OOM(transpose(x, 0, 1), "transpose: not enough memory for a tensor of shape (16384, 512)");
  EXPECT_OOM(reshape(x, {-1}), "reshape: not enough memory for a tensor of shape (8388608)");
  EXPECT_OOM(masked_fill(x, full_array<bool>({1}, true, "mask"), 0.0f), "masked_fill: not enough memory");
  EXPECT_OOM(tril(x), "tril: not enough memory for a tensor of shape " BIG);
  EXPECT_OOM(sum(x, {0}, /*keepdim=*/false), "no error");  // (16384): fits
  // Reductions to an output as large as their input: their accumulators (double) are checked too.
  const F32 x3 = reshape(x, {static_cast<std::int64_t>(kRows), static_cast<std::int64_t>(kCols), 1});
  EXPECT_OOM(sum(x3, {2}, false), "sum: not enough memory for a tensor of shape (8388608): tried to allocate 67108864");
  EXPECT_OOM(var(x3, {2}, true, false), "var: not enough memory for a tensor of shape (8388608)");
  EXPECT_OOM(max(x3, 2, false), "max: not enough memory for a tensor of shape (8388608)");
  const F32 a = ones<float>({4096, 64}), c = ones<float>({64, 4096});
  EXPECT_OOM(matmul(a, c),
             "matmul: not enough memory for a tensor of shape (4096, 4096): tried to allocate "
             "67108864 bytes");
  EXPECT_EQ(sum(ones<float>({3})).item(), 3.0f);  // the library still works
}

TEST(Allocation, ARealAllocationFailureInABackwardNamesTheOpTheShapeAndTheBytes) {
  const F32 x = ones<float>({kRows, kCols}, /*requires_grad=*/true);
  const F32 w = ones<float>({kCols}, true), b = zeros<float>({kCols}, true);
  (void)sum(gelu(x));
  {  // sum's backward spreads the scalar gradient over x's shape
    const F32 s = sum(x);
    EXPECT_OOM(s.backward(), "sum: not enough memory for a tensor of shape " BIG);
  }
  {  // the gradient handed to backward is copied
    const F32 e = exp(x);
    EXPECT_OOM(e.backward(e), "backward: not enough memory for a tensor of shape " BIG);
  }
  {
    const F32 p = mul(x, x);
    EXPECT_MESSAGE_HAS(backward_failure_at(p, sum(p)), "mul: not enough memory for a tensor of shape " BIG);
  }
  {
    const F32 p = softmax(x, -1);
    EXPECT_MESSAGE_HAS(backward_failure_at(p, sum(mul(p, x))), "softmax: not enough memory for a tensor of shape " BIG);
  }
  {
    const F32 p = layer_norm(x, {kCols}, w, b);
    EXPECT_MESSAGE_HAS(backward_failure_at(p, sum(p)),
                       "layer_norm (backward): not enough memory for a tensor of shape " BIG);
  }
  {
    const F32 p = dropout(x, 0.5, true);
    EXPECT_MESSAGE_HAS(backward_failure_at(p, sum(p)),
                       "dropout (backward): not enough memory for a tensor of shape " BIG);
  }
  {  // sort's backward scatters into zeros of x's shape (32 MiB)
    const F32 p = sort(x, -1).first;
    EXPECT_MESSAGE_HAS(backward_failure_at(p, sum(p)), "sort: not enough memory for a tensor of shape " BIG);
  }
  {  // dA of matmul: (512, 16384)
    const F32 p = matmul(x, ones<float>({kCols, 8}));
    EXPECT_MESSAGE_HAS(backward_failure_at(p, sum(p)),
                       "matmul (backward): not enough memory for a tensor of shape " BIG);
  }
  EXPECT_EQ(sum(ones<float>({3})).item(), 3.0f);
}

// Buffers held by the array cache never cause an OutOfMemoryError: an allocation that fails frees
// the thread's cache and tries again. Here the cache holds 32 MiB and a 64 MiB array of another size
// fits only once those are given back.
TEST(Allocation, AFailedAllocationFirstEmptiesTheArrayCache) {
  if (!array_cache_enabled()) GTEST_SKIP() << "the array cache is off (XGRAD_ARRAY_CACHE=0)";
  {
    // The cache keeps a count the thread takes: take one (512, 16384) buffer and give it back.
    Array<float> held = empty_array<float>({kRows, kCols}, "test");
    detail::recycle(held);
  }
  ASSERT_GE(array_cache_stats().cached_bytes, kRows * kCols * sizeof(float));
  std::string outcome = "no error";
  {
    AddressSpaceLimit limit(std::size_t{48} << 20);  // 48 MiB beyond what the process maps now
    limit.apply();
    // Without giving the cache's buffers back it does not fit (what empty_array did before).
    EXPECT_THROW((void)Array<float>::from_shape({2 * kRows, kCols}), std::bad_alloc);
    try {
      const Array<float> big = empty_array<float>({2 * kRows, kCols}, "big");  // 64 MiB
      EXPECT_EQ(big.size(), 2 * kRows * kCols);
    } catch (const std::exception& e) {
      outcome = e.what();
    }
  }
  EXPECT_EQ(outcome, "no error");
  EXPECT_EQ(array_cache_stats().cached_bytes, 0u);
}

#endif  // !sanitizers

// A Function's backward that fails to allocate on its own (not through empty_array): the engine
// names the op and the output.
struct Hungry : autograd::Function<Hungry> {
  static F32 forward(autograd::AutogradContext<float>*, F32 x) { return F32(copy_array(x.value(), "Hungry")); }
  static std::vector<F32> backward(autograd::AutogradContext<float>*, std::vector<F32>) { throw std::bad_alloc(); }
};

TEST(Allocation, ABareBadAllocInABackwardBecomesAnOutOfMemoryErrorNamingTheOp) {
  const F32 x = ones<float>({3}, true);
  const F32 s = sum(Hungry::apply(x));
  try {
    s.backward();
    ADD_FAILURE() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the backward of '"), std::string::npos) << m;
    EXPECT_NE(m.find("Hungry"), std::string::npos) << m;
    EXPECT_NE(m.find("': not enough memory (an allocation failed while computing the gradients for its output of "
                     "shape (3))"),
              std::string::npos)
        << m;
  }
}

}  // namespace
