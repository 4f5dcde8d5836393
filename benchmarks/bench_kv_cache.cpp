// The cost of one new token of a causal TransformerEncoder at a given context length, two ways:
// nn::forward_cached with a KVCache holding the context (O(context) per token), and a full
// causal forward over the context plus the token (O(context^2)). float32, a pre-norm GELU stack
// of 4 layers, d_model 128, 4 heads, dim_feedforward 512, one sequence; median microseconds of
// interleaved rounds. No flags: build/release/benchmarks/bench_kv_cache.
#include <xgrad/xgrad.hpp>

#include "bench_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

using xgrad::Tensor;
namespace nn = xgrad::nn;

using xgrad::bench::median;
using xgrad::bench::time_us;

int main() {
  xgrad::manual_seed(0);
  const std::int64_t d = 128, layers = 4;
  auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(
      nn::TransformerEncoderLayerOptions(d, 4).dim_feedforward(512).dropout(0.0).activation("gelu")
          .batch_first(true).norm_first(true));
  nn::TransformerEncoder<float> encoder(layer, layers, std::make_shared<nn::LayerNorm<float>>(d));
  encoder.eval();
  xgrad::NoGradGuard no_grad;
  std::printf("threads %d; per new token, median of 7 interleaved rounds\n", xgrad::get_num_threads());
  std::printf("%8s %14s %14s %8s\n", "context", "cached (us)", "full (us)", "full/cached");
  for (std::int64_t context : {16, 64, 256, 512}) {
    const auto length = static_cast<std::size_t>(context) + 1;
    const Tensor<float> x = xgrad::randn<float>({1, length, static_cast<std::size_t>(d)});
    const Tensor<float> token = xgrad::slice(x, 1, context, context + 1);
    std::vector<nn::KVCache<float>> caches;
    nn::forward_cached(encoder, xgrad::slice(x, 1, 0, context), caches);  // the context, once
    const int calls = context <= 64 ? 50 : 10;
    std::vector<double> cached, full;
    for (int round = 0; round < 7; ++round) {
      cached.push_back(time_us(
          [&] {
            for (auto& cache : caches) cache.crop(context);  // back to the context: the same step each call
            nn::forward_cached(encoder, token, caches);
          },
          calls));
      full.push_back(time_us([&] { encoder.forward(x, {}, {}, /*is_causal=*/true); }, calls));
    }
    const double c = median(cached), f = median(full);
    std::printf("%8lld %14.1f %14.1f %8.1fx\n", static_cast<long long>(context), c, f, f / c);
  }
  return 0;
}
