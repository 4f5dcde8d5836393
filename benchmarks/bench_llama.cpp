// The real sizes of the Llama family with random weights (no download): builds the model of a
// named shape, runs training steps at batch 1 and context L (forward, cross-entropy, backward and,
// unless --no-optimizer, an AdamW step) and generates tokens with the KV cache; prints the times,
// the RSS after building and the process's peak RSS as one line of JSON. One configuration per
// process, so that the peak is that configuration's alone.
//
//   bench_llama --shape smollm2-135m --L 1024 [--steps 2] [--generate 32] [--threads 2]
//   bench_llama --shape llama-3.2-1b --L 1024 --steps 1 --no-optimizer
//   bench_llama --shape smollm2-135m --L 256 --layers 4 --generate 0      (a shorter model, same layer shape)
//   bench_llama --shape smollm2-135m --L 1024 --layers 4 --generate 0 --profile llama.json   (the last step)
//   bench_llama --shape smollm2-135m --L 1024 --gradient-checkpointing   # each layer recomputed
//   bench_llama --shape smollm2-135m --L 1024 --lora 16 --lora-targets all-linear   # LoRA, the rest frozen
//   bench_llama --shape smollm2-135m --L 256 --layers 4 --lora 16 --bf16   # forward and loss under AutocastGuard
//
// Shapes (config.json's of the published models): smollm2-135m (30 layers, hidden 576, 9 heads, 3
// KV heads, intermediate 1536, vocab 49152, tied, rope_theta 100000), llama-3.2-1b (16 layers,
// hidden 2048, 32 heads, 8 KV heads, head_dim 64, intermediate 8192, vocab 128256, tied,
// rope_theta 500000, llama3 scaling factor 32), and tiny (for the smoke test).
#include <xgrad/xgrad.hpp>

#include "bench_util.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <xgrad/models/llama.hpp>
#include <xgrad/nn/lora.hpp>

using xgrad::bench::peak_rss_mib;
using xgrad::bench::seconds_since;

namespace {

struct Options {
  std::string shape = "smollm2-135m";
  std::string profile;  // --profile: the Chrome trace of the last step
  std::int64_t L = 1024, generate = 32;
  int threads = 2, steps = 2, layers = 0;
  bool no_optimizer = false, gradient_checkpointing = false, bf16 = false;
  int lora = 0;  // rank; 0: every weight trains
  std::vector<std::string> lora_targets = {"all-linear"};
};

xgrad::models::LlamaConfig shape_config(const std::string& shape) {
  xgrad::models::LlamaConfig c;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 8192;
  if (shape == "smollm2-135m") {
    c.num_hidden_layers = 30, c.hidden_size = 576, c.num_attention_heads = 9, c.num_key_value_heads = 3;
    c.head_dim = 64, c.intermediate_size = 1536, c.vocab_size = 49152, c.rope_theta = 100000, c.rms_norm_eps = 1e-5;
  } else if (shape == "llama-3.2-1b") {
    c.num_hidden_layers = 16, c.hidden_size = 2048, c.num_attention_heads = 32, c.num_key_value_heads = 8;
    c.head_dim = 64, c.intermediate_size = 8192, c.vocab_size = 128256, c.rope_theta = 500000, c.rms_norm_eps = 1e-5;
    c.rope_scaling.rope_type = "llama3", c.rope_scaling.factor = 32, c.rope_scaling.low_freq_factor = 1;
    c.rope_scaling.high_freq_factor = 4, c.rope_scaling.original_max_position_embeddings = 8192;
  } else {  // tiny
    c.num_hidden_layers = 2, c.hidden_size = 64, c.num_attention_heads = 4, c.num_key_value_heads = 2;
    c.head_dim = 16, c.intermediate_size = 160, c.vocab_size = 320;
  }
  return c;
}

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"Training steps and generation of a Llama-family model of a published shape, random weights."};
  app.add_option("--shape", o.shape)
      ->check(CLI::IsMember({"smollm2-135m", "llama-3.2-1b", "tiny"}))
      ->capture_default_str();
  app.add_option("--L", o.L)->check(CLI::Range(2, 8192))->capture_default_str();
  app.add_option("--steps", o.steps)->check(CLI::Range(0, 1000))->capture_default_str();
  app.add_option("--generate", o.generate)->check(CLI::Range(0, 8192))->capture_default_str();
  app.add_option("--layers", o.layers, "override the shape's num_hidden_layers (0: keep)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--threads", o.threads)->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--profile", o.profile,
                 "profile the last step (xgrad::profiler): a Chrome trace here, the table on stderr");
  app.add_flag("--no-optimizer", o.no_optimizer, "forward and backward only (no AdamW state)");
  app.add_flag("--gradient-checkpointing", o.gradient_checkpointing,
               "recompute each decoder layer's activations in the backward (utils::checkpoint)");
  app.add_option("--lora", o.lora, "LoRA of this rank (alpha 2 R), every other weight frozen")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_option("--lora-targets", o.lora_targets, "module names (q_proj v_proj ...) or all-linear")
      ->capture_default_str();
  app.add_flag("--bf16", o.bf16,
               "each step's forward and loss under xgrad::AutocastGuard (bf16 gemms, fp32 accumulation), "
               "as bench_train_step --bf16; the backward follows the forward");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  return o;
}

// The median step time, the first step (AdamW allocating its moments, caches warming) excluded
// when there are more.
double steady_median(const std::vector<double>& times) {
  return xgrad::bench::median(times.size() > 1 ? std::vector<double>(times.begin() + 1, times.end()) : times);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  xgrad::set_num_threads(o.threads);
  auto config = shape_config(o.shape);
  if (o.layers > 0) config.num_hidden_layers = o.layers;
  auto t0 = std::chrono::steady_clock::now();
  xgrad::Generator g(1);
  xgrad::models::LlamaForCausalLM<float> model(config, &g);
  const double build_s = seconds_since(t0);
  if (o.lora > 0)
    xgrad::nn::inject_lora(model,
                           xgrad::nn::LoraConfig().r(o.lora).lora_alpha(2.0 * o.lora).target_modules(o.lora_targets));
  std::size_t n_params = 0, n_trainable = 0;
  for (const auto& p : model.parameters())
    n_params += std::size_t(p.numel()), n_trainable += p.requires_grad() ? std::size_t(p.numel()) : 0;
  const double rss_built = peak_rss_mib();

  const std::size_t L = std::size_t(o.L);
  xgrad::IndexArray x = xgrad::empty_array<std::int64_t>(xgrad::Shape{1, L}),
                    y = xgrad::empty_array<std::int64_t>(xgrad::Shape{L});
  std::uint64_t s = 0x9E3779B97F4A7C15ULL;
  for (std::size_t i = 0; i < L; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x(0, i) = std::int64_t((s >> 33) % std::uint64_t(config.vocab_size));
    if (i > 0) y(i - 1) = x(0, i);
  }
  y(L - 1) = x(0, 0);
  const auto adamw = xgrad::optim::AdamWOptions(1e-4).weight_decay(0.1);
  xgrad::optim::AdamW<float> optimizer(xgrad::optim::weight_decay_groups(model.parameters(), adamw), adamw);
  std::vector<double> times;
  double loss = 0;
  model.train();
  if (o.gradient_checkpointing) model.gradient_checkpointing_enable();
  std::unique_ptr<xgrad::profiler::Profile> profile;
  for (int r = 0; r < o.steps; ++r) {
    if (!o.profile.empty() && r + 1 == o.steps) profile = std::make_unique<xgrad::profiler::Profile>();
    t0 = std::chrono::steady_clock::now();
    optimizer.zero_grad(true);
    xgrad::Tensor<float> l;
    {
      const xgrad::AutocastGuard autocast(o.bf16);  // the backward follows the forward's choice
      l = xgrad::cross_entropy(xgrad::reshape(model.forward(x), {-1, config.vocab_size}), y);
    }
    l.backward();
    if (!o.no_optimizer) optimizer.step();
    times.push_back(seconds_since(t0));
    loss = double(l.item());
  }
  if (profile) std::fprintf(stderr, "%s", xgrad::profiler::save_report(*profile, o.profile).c_str());
  profile.reset();
  const double rss_trained = peak_rss_mib();
  double generate_s = 0;
  if (o.generate > 0) {
    xgrad::SamplingOptions greedy;
    greedy.greedy = true;
    xgrad::IndexArray prompt = xgrad::empty_array<std::int64_t>(xgrad::Shape{1, 8});
    for (std::size_t i = 0; i < 8; ++i) prompt(0, i) = x(0, i);
    t0 = std::chrono::steady_clock::now();
    model.generate(prompt, o.generate, greedy);
    generate_s = seconds_since(t0);
  }
  std::string list;
  for (double t : times) list += (list.empty() ? "" : ",") + std::to_string(t);
  std::printf(
      "{\"shape\":\"%s\",\"layers\":%lld,\"params\":%zu,\"lora\":%d,\"trainable\":%zu,\"L\":%lld,"
      "\"threads\":%d,\"precision\":\"%s\",\"optimizer\":%s,\"gradient_checkpointing\":%s,\"build_s\":%.3f,"
      "\"step_times_s\":[%s],\"median_step_s\":%.6g,\"loss\":%.4f,\"generated\":%lld,\"tokens_per_s\":%.3f,"
      "\"rss_built_mib\":%.1f,\"peak_rss_training_mib\":%.1f,\"peak_rss_mib\":%.1f}\n",
      o.shape.c_str(), static_cast<long long>(config.num_hidden_layers), n_params, o.lora, n_trainable,
      static_cast<long long>(o.L), o.threads, o.bf16 ? "bf16" : "fp32", o.no_optimizer ? "false" : "true",
      o.gradient_checkpointing ? "true" : "false", build_s, list.c_str(), times.empty() ? 0.0 : steady_median(times),
      loss, static_cast<long long>(o.generate), generate_s > 0 ? double(o.generate) / generate_s : 0.0, rss_built,
      rss_trained, peak_rss_mib());
  return 0;
}
