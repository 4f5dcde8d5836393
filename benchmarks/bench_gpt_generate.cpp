// Generation speed of models::GPT: tokens per second for --tokens new tokens after a prompt of
// --context tokens (a model whose block_size holds both), with the KV cache (GPT::generate's
// default) or recomputing the whole context for every token (use_cache = false, as nanoGPT's
// generate does), and the process's peak resident memory. One line of JSON per run, read by
// benchmarks/gpt_compare.py:
//
//   bench_gpt_generate --n-layer 6 --n-head 6 --n-embd 384 --vocab 65 --context 1024 --tokens 500 --no-cache
//
// --bf16 generates under one xgrad::AutocastGuard (each weight cast to bf16 once, by the cast
// cache); --bf16 --no-cast-cache casts every weight at every token, as before the cache.
#include <chrono>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include <xgrad/models/gpt.hpp>
#include <xgrad/xgrad.hpp>

#include "bench_util.hpp"

using xgrad::bench::peak_rss_mib;

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();
  int n_layer = 6, n_head = 6, n_embd = 384, vocab = 65, context = 64, tokens = 500, threads = 2;
  bool no_cache = false, bf16 = false, no_cast_cache = false;
  CLI::App app{"Tokens per second of GPT::generate, with the KV cache or recomputing."};
  app.add_option("--n-layer", n_layer)->capture_default_str();
  app.add_option("--n-head", n_head)->capture_default_str();
  app.add_option("--n-embd", n_embd)->capture_default_str();
  app.add_option("--vocab", vocab)->capture_default_str();
  app.add_option("--context", context, "prompt length")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--tokens", tokens, "new tokens")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", threads)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--no-cache", no_cache, "recompute the whole context for every token");
  app.add_flag("--bf16", bf16, "generate under bf16 autocast (xgrad::AutocastGuard)");
  app.add_flag("--no-cast-cache", no_cast_cache, "with --bf16: cast the weights at every use, not once");
  CLI11_PARSE(app, argc, argv);
  xgrad::set_num_threads(threads);

  xgrad::models::GPTConfig config;
  config.vocab_size = vocab;
  config.block_size = context + tokens;
  config.n_layer = n_layer;
  config.n_head = n_head;
  config.n_embd = n_embd;
  xgrad::Generator generator(0);
  xgrad::models::GPT<float> model(config, &generator);
  xgrad::IndexArray prompt = xgrad::IndexArray::from_shape({1, std::size_t(context)});
  for (auto& t : prompt) t = std::int64_t(generator.next_u64() % std::uint64_t(vocab));
  xgrad::SamplingOptions options;
  options.temperature = 0.8;
  options.top_k = 40;
  const auto start = std::chrono::steady_clock::now();
  xgrad::IndexArray out;
  {
    xgrad::AutocastGuard autocast(bf16, !no_cast_cache);
    out = model.generate(prompt, tokens, options, &generator, !no_cache);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const char* precision = !bf16           ? ""
                          : no_cast_cache ? "\"precision\": \"bf16, no cast cache\", "
                                          : "\"precision\": \"bf16\", ";
  std::printf(
      "{%s\"framework\": \"xgrad\", \"mode\": \"%s\", \"context\": %d, \"tokens\": %d, \"seconds\": %.4f, "
      "\"tokens_per_s\": %.2f, \"peak_rss_mib\": %.1f, \"generated\": %zu}\n",
      precision, no_cache ? "recompute" : "cache", context, tokens, seconds, tokens / seconds, peak_rss_mib(),
      out.shape(1) - std::size_t(context));
  return 0;
}
