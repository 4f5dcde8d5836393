// Long-context GPT training step: one step of xgrad::models::GPT (forward, cross-entropy, backward,
// AdamW step) at batch 1 and sequence length L on one attention path (tiled or materialized, forced
// with set_attention_path), its time and the process's peak RSS. One configuration per process, so
// that the peak RSS is that configuration's alone (benchmarks/gpt_long.py runs the table of
// docs/performance.md, beside PyTorch).
//
//   bench_gpt_long --path tiled --L 4096 [--layers 2] [--heads 12] [--embd 768] [--vocab 256]
//                  [--threads 2] [--steps 2]
//
// The model's block_size is L; tokens are drawn at random from the vocabulary. Steps after the
// first reuse the optimizer's state (AdamW allocates its moments in the first step), so the peak
// RSS is that of a step in steady state. Prints one line of JSON: per-step times, their median
// (the first step excluded when there are more), the peak RSS (getrusage ru_maxrss) and the RSS
// after the model and optimizer were built, before the first step. A materialized run whose
// probabilities would not fit ends with the path's memory guard message on stderr and exit 3.
#include <xgrad/xgrad.hpp>

#include "bench_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <xgrad/models/gpt.hpp>

using xgrad::bench::seconds_since;
using xgrad::bench::peak_rss_mib;

namespace {

struct Options {
  std::string path = "tiled";
  std::int64_t L = 1024, layers = 2, heads = 12, embd = 768, vocab = 256;
  int threads = 2, steps = 2;
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"One GPT training step at long context on one attention path."};
  app.add_option("--path", o.path)->check(CLI::IsMember({"tiled", "materialized", "auto"}))->capture_default_str();
  app.add_option("--L", o.L)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--layers", o.layers)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--heads", o.heads)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--embd", o.embd)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--vocab", o.vocab)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--threads", o.threads)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--steps", o.steps)->check(CLI::Range(1, 100000000))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  xgrad::set_num_threads(o.threads);
  xgrad::set_attention_path(o.path == "tiled"          ? xgrad::AttentionPath::Tiled
                            : o.path == "materialized" ? xgrad::AttentionPath::Materialized
                                                       : xgrad::AttentionPath::Auto);
  xgrad::models::GPTConfig config;
  config.vocab_size = o.vocab;
  config.block_size = o.L;
  config.n_layer = o.layers;
  config.n_head = o.heads;
  config.n_embd = o.embd;
  xgrad::Generator g(1);
  xgrad::models::GPT<float> model(config, &g);
  model.train();

  std::vector<xgrad::Tensor<float>> decay, no_decay;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const auto options = xgrad::optim::AdamWOptions(1e-4).betas({0.9, 0.99}).weight_decay(0.1);
  xgrad::optim::AdamW<float> optimizer({xgrad::optim::ParamGroup<float>(decay),
                                        xgrad::optim::ParamGroup<float>(
                                            no_decay, xgrad::optim::AdamWOptions(options).weight_decay(0))},
                                       options);
  std::size_t n_params = 0;
  for (const auto& p : model.parameters()) n_params += std::size_t(p.numel());

  // x: (1, L) random tokens, y: x shifted by one (its last target random too).
  const std::size_t L = std::size_t(o.L);
  xgrad::IndexArray tokens = xgrad::IndexArray::from_shape({L + 1});
  std::uint64_t s = 0x9E3779B97F4A7C15ULL;
  for (std::size_t i = 0; i <= L; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    tokens(i) = std::int64_t((s >> 33) % std::uint64_t(o.vocab));
  }
  xgrad::IndexArray x = xgrad::IndexArray::from_shape({std::size_t(1), L}), y = xgrad::IndexArray::from_shape({L});
  for (std::size_t i = 0; i < L; ++i) x(0, i) = tokens(i), y(i) = tokens(i + 1);
  const double rss_built = peak_rss_mib();

  std::vector<double> times;
  double loss = 0;
  try {
    for (int r = 0; r < o.steps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      optimizer.zero_grad(true);
      // logits (1, L, V) -> (L, V)
      xgrad::Tensor<float> logits = model.forward(x);
      xgrad::Tensor<float> l = xgrad::cross_entropy(xgrad::reshape(logits, {-1, o.vocab}), y);
      l.backward();
      optimizer.step();
      times.push_back(seconds_since(t0));
      loss = double(l.item());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpt_long: %s\n", e.what());
    std::printf("{\"path\":\"%s\",\"L\":%lld,\"layers\":%lld,\"error\":\"memory guard\",\"peak_rss_mib\":%.1f}\n",
                o.path.c_str(), static_cast<long long>(o.L), static_cast<long long>(o.layers), peak_rss_mib());
    return 3;
  }
  std::vector<double> steady(times.size() > 1 ? times.begin() + 1 : times.begin(), times.end());
  std::sort(steady.begin(), steady.end());
  std::string list;
  for (double t : times) list += (list.empty() ? "" : ",") + std::to_string(t);
  std::printf(
      "{\"path\":\"%s\",\"L\":%lld,\"layers\":%lld,\"heads\":%lld,\"embd\":%lld,\"vocab\":%lld,\"params\":%zu,"
      "\"threads\":%d,\"times_s\":[%s],\"median_s\":%.6g,\"loss\":%.4f,\"rss_built_mib\":%.1f,"
      "\"peak_rss_mib\":%.1f}\n",
      o.path.c_str(), static_cast<long long>(o.L), static_cast<long long>(o.layers), static_cast<long long>(o.heads),
      static_cast<long long>(o.embd), static_cast<long long>(o.vocab), n_params, o.threads, list.c_str(),
      steady[steady.size() / 2], loss, rss_built, peak_rss_mib());
  return 0;
}
