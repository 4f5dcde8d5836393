// Operands rounded to bf16 once and shared by several gemms (bf16.hpp: pack_bf16, Bf16Matrix,
// gemm_bf16 on packed operands): the packing is bf16_bits entry by entry, a gemm on packed operands
// is bit for bit gemm_bf16 on the float operands (either backend, either path: portable, oneDNN
// single block, pool split, oneDNN's own threads), and linear under autocast -- which packs x and
// W in its forward and keeps them for its backward -- is bit for bit gemm_bf16 on its operands.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/backend/onednn.hpp>
#include <xgrad/xgrad.hpp>

namespace xgrad {
namespace {

struct Threads {
  explicit Threads(int n) : previous(get_num_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(previous); }
  int previous;
};
struct Backend {
  explicit Backend(GemmBackend b) : previous(get_gemm_backend()) { set_gemm_backend(b); }
  ~Backend() { set_gemm_backend(previous); }
  GemmBackend previous;
};
std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  Generator g(seed);
  const Tensor<float> t = randn<float>({n}, g);
  return std::vector<float>(t.value().data(), t.value().data() + n);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Bf16Packed, PackIsBf16BitsOnStridedRows) {
  const std::size_t rows = 37, cols = 29, ld = 41;
  std::vector<float> src = random_floats(rows * ld, 1);
  // Ties, NaN of both signs, infinities, denormals, past bf16's largest.
  const std::uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xff800001u, 0x7f800000u,
                                    0xff800000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x00008000u};
  for (std::size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i)
    std::memcpy(&src[i * ld + i], &specials[i], sizeof(float));
  Threads two(2);
  const detail::Bf16Matrix m = detail::to_bf16(src.data(), rows, cols, ld);
  ASSERT_EQ(m.rows, rows);
  ASSERT_EQ(m.cols, cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      ASSERT_EQ(m.bits[r * cols + c], detail::bf16_bits(src[r * ld + c])) << "row " << r << " col " << c;
}

// gemm_bf16 on packed operands against gemm_bf16 on the floats: the same bits in C, its padding
// left alone.
void expect_packed_equals_float(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                                float beta) {
  const std::size_t ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n, ldc = n + 3;
  const std::vector<float> a = random_floats(ra * ca, 10 + m), b = random_floats(rb * cb, 20 + n);
  const std::vector<float> c0 = random_floats(m * ldc, 30 + k);
  std::vector<float> c_float = c0, c_packed = c0;
  detail::gemm_bf16(ta, tb, m, n, k, alpha, a.data(), ca, b.data(), cb, beta, c_float.data(), ldc);
  const detail::Bf16Matrix pa = detail::to_bf16(a.data(), ra, ca, ca), pb = detail::to_bf16(b.data(), rb, cb, cb);
  detail::gemm_bf16(ta, tb, m, n, k, alpha, pa, pb, beta, c_packed.data(), ldc);
  EXPECT_TRUE(same_bits(c_float, c_packed)) << "ta " << ta << " tb " << tb << " (" << m << ", " << n << ", " << k
                                            << ") alpha " << alpha << " beta " << beta;
  // The operands were rounded: C differs from the float32 gemm's.
  std::vector<float> c_fp32 = c0;
  detail::gemm<float>(ta, tb, m, n, k, alpha, a.data(), ca, b.data(), cb, beta, c_fp32.data(), ldc);
  EXPECT_FALSE(same_bits(c_fp32, c_packed)) << "the packed operands were not rounded";
}

TEST(Bf16Packed, GemmOnPackedOperandsIsGemmBf16BitForBit) {
  for (GemmBackend backend : {GemmBackend::onednn, GemmBackend::openblas}) {
    Backend b(backend);
    for (int threads : {1, 2}) {
      Threads t(threads);
      for (int tr = 0; tr < 4; ++tr) {
        const bool ta = tr & 1, tb = tr & 2;
        expect_packed_equals_float(ta, tb, 7, 5, 33, 1.0f, 0.0f);       // portable path
        expect_packed_equals_float(ta, tb, 64, 72, 48, 0.5f, 1.0f);     // oneDNN, one block
        expect_packed_equals_float(ta, tb, 300, 120, 200, 1.0f, 0.0f);  // oneDNN, split over the pool
        expect_packed_equals_float(ta, tb, 130, 96, 260, 1.0f, 0.5f);
        expect_packed_equals_float(ta, tb, 90, 400, 60, 1.0f, 0.0f);  // more columns than rows
      }
    }
  }
}

TEST(Bf16Packed, ShapeMismatchNamesBothShapes) {
  const std::vector<float> a(6, 1.0f), b(6, 1.0f);
  const detail::Bf16Matrix pa = detail::to_bf16(a.data(), 2, 3, 3), pb = detail::to_bf16(b.data(), 3, 2, 2);
  std::vector<float> c(4);
  try {
    detail::gemm_bf16(false, true, 2, 2, 3, 1.0f, pa, pb, 0.0f, c.data(), 2);  // B would be (2, 3)
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("expected A (2, 3) and B (2, 3)"), std::string::npos) << what;
    EXPECT_NE(what.find("got A (2, 3) and B (3, 2)"), std::string::npos) << what;
  }
}

// linear under autocast: y = b + x W^T, dx = dy W, dW = dy^T x, each bit for bit gemm_bf16 on the
// float operands (the forward's rounded x and W serve the backward; dy is rounded once for both).
void expect_linear_is_gemm_bf16(std::size_t rows, std::size_t in, std::size_t outf) {
  for (int threads : {1, 2}) {
    Threads t(threads);
    Generator g(5);
    const Tensor<float> x = randn<float>({3, rows / 3, in}, g, true), w = randn<float>({outf, in}, g, true),
                        bias = randn<float>({outf}, g, true);
    Tensor<float> y;
    {
      AutocastGuard guard;
      y = linear(x, w, bias);
    }
    const Array<float> dy = randn<float>({3, rows / 3, outf}, g).value();
    y.backward(Tensor<float>(dy));
    const float* px = x.value().data();
    const float* pw = w.value().data();
    std::vector<float> y_ref(rows * outf);
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(&y_ref[r * outf], bias.value().data(), outf * sizeof(float));
    detail::gemm_bf16(false, true, rows, outf, in, 1.0f, px, in, pw, in, 1.0f, y_ref.data(), outf);
    std::vector<float> dx_ref(rows * in), dw_ref(outf * in);
    detail::gemm_bf16(false, false, rows, in, outf, 1.0f, dy.data(), outf, pw, in, 0.0f, dx_ref.data(), in);
    detail::gemm_bf16(true, false, outf, in, rows, 1.0f, dy.data(), outf, px, in, 0.0f, dw_ref.data(), in);
    const auto as_vector = [](const Array<float>& a) { return std::vector<float>(a.data(), a.data() + a.size()); };
    EXPECT_TRUE(same_bits(as_vector(y.value()), y_ref)) << threads << " threads: forward";
    EXPECT_TRUE(same_bits(as_vector(x.grad()), dx_ref)) << threads << " threads: dx";
    EXPECT_TRUE(same_bits(as_vector(w.grad()), dw_ref)) << threads << " threads: dW";
  }
}

TEST(Bf16Packed, LinearIsGemmBf16OnItsOperandsForwardAndBackward) {
  for (GemmBackend backend : {GemmBackend::onednn, GemmBackend::openblas}) {
    Backend b(backend);
    expect_linear_is_gemm_bf16(300, 200, 120);  // packed once (oneDNN bf16 matmul)
    expect_linear_is_gemm_bf16(96, 64, 384);    // more outputs than rows
    expect_linear_is_gemm_bf16(6, 5, 4);        // the portable path: rounded per gemm
  }
}

TEST(Bf16Packed, PacksOnlyForOneDnnsBf16Matmul) {
  {
    Backend b(GemmBackend::onednn);
    const bool has = std::string(detail::bf16_gemm_path()).find("oneDNN") != std::string::npos;
    EXPECT_EQ(detail::gemm_bf16_takes_packed(300, 200, 120), has);
    EXPECT_FALSE(detail::gemm_bf16_takes_packed(6, 5, 4));  // under 2^18 multiply-adds: portable
    EXPECT_FALSE(detail::gemm_bf16_takes_packed(0, 5000, 5000));
  }
  Backend b(GemmBackend::openblas);
  EXPECT_FALSE(detail::gemm_bf16_takes_packed(300, 200, 120));
}

}  // namespace
}  // namespace xgrad
