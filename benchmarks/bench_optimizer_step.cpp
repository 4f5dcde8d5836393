// One optim::AdamW<float> step (the default options: lr 1e-3, weight_decay 1e-2) over two lists of
// parameters, each with a gradient set once before timing:
//   gpt12:   12 transformer layers at d = 768: per layer 4 weights of 768x768 (q, k, v, out), 2 of
//            3072x768 (the MLP), 4 biases of 768, one of 3072, one of 768 and 2 LayerNorms' weight
//            and bias (768 each); 85.1M floats in 192 tensors
//   small200: 200 tensors of 1,000 floats
// and clip_grad_norm_ over the gpt12 list (max_norm infinity: the norm alone, gradients unchanged).
// Google Benchmark; the thread count is --threads N (xgrad::set_num_threads; default xgrad's own,
// every core or OMP_NUM_THREADS). Medians of 3 repetitions:
//   bench_optimizer_step --threads 2 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace {

using xgrad::Tensor;

std::vector<Tensor<float>> with_grads(const std::vector<xgrad::Shape>& shapes) {
  xgrad::Generator gen(0);
  std::vector<Tensor<float>> params;
  for (const auto& shape : shapes) {
    params.push_back(xgrad::randn<float>(shape, gen, /*requires_grad=*/true));
    params.back().set_grad(xgrad::randn<float>(shape, gen).value());
  }
  return params;
}

std::vector<xgrad::Shape> gpt12_shapes() {
  std::vector<xgrad::Shape> shapes;
  for (int layer = 0; layer < 12; ++layer) {
    for (int i = 0; i < 4; ++i) shapes.push_back({768, 768});
    shapes.push_back({3072, 768});
    shapes.push_back({768, 3072});
    for (int i = 0; i < 4; ++i) shapes.push_back({768});
    shapes.push_back({3072});
    shapes.push_back({768});
    for (int i = 0; i < 4; ++i) shapes.push_back({768});
  }
  return shapes;
}

std::vector<xgrad::Shape> small200_shapes() { return std::vector<xgrad::Shape>(200, xgrad::Shape{1000}); }

std::int64_t elements(const std::vector<Tensor<float>>& params) {
  std::int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

void adamw_step(benchmark::State& state, const std::vector<xgrad::Shape>& shapes) {
  std::vector<Tensor<float>> params = with_grads(shapes);
  xgrad::optim::AdamW<float> opt(params);
  opt.step();  // the state's arrays exist from here on
  for (auto _ : state) opt.step();
  state.counters["threads"] = xgrad::get_num_threads();
  state.counters["elements/s"] =
      benchmark::Counter(static_cast<double>(elements(params)), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AdamWStep_gpt12(benchmark::State& state) { adamw_step(state, gpt12_shapes()); }
void BM_AdamWStep_small200(benchmark::State& state) { adamw_step(state, small200_shapes()); }

void BM_ClipGradNorm_gpt12(benchmark::State& state) {
  std::vector<Tensor<float>> params = with_grads(gpt12_shapes());
  for (auto _ : state) benchmark::DoNotOptimize(xgrad::optim::clip_grad_norm_(params, INFINITY));
  state.counters["threads"] = xgrad::get_num_threads();
}

BENCHMARK(BM_AdamWStep_gpt12)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamWStep_small200)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ClipGradNorm_gpt12)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // --threads N / --threads=N is ours; everything else goes to Google Benchmark.
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc)
      xgrad::set_num_threads(std::atoi(argv[++i]));
    else if (arg.rfind("--threads=", 0) == 0)
      xgrad::set_num_threads(std::atoi(arg.c_str() + 10));
    else
      rest.push_back(argv[i]);
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
