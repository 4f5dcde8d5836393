// Fine-tuning a causal language model on a text file, the part finetune_gpt2 and finetune_llm
// share: the settings and their flags, the text tokenized once into a memory-mapped token file
// (its last tenth held out), random windows from a DataLoader the Trainer tracks (so that --resume
// continues bit for bit), AdamW with weight-decay groups, warmup then cosine decay to lr / 10, the
// held-out loss and the step time. Any model whose forward(IndexArray (N, T)) gives logits
// (N, T, V) fits:
//
//   lm_finetune::Run run = lm_finetune::fit(trainer, model, c, tok, vocab_size, made_tokens, "model: ...");
//   if (run.stopped) return *run.stopped;   // Ctrl-C or --stop-at: the checkpoint is saved
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/data/token_file.hpp>
#include <xgrad/nn/lora.hpp>
#include <xgrad/train/cli.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

#include "bpe_text.hpp"
#include "files.hpp"

namespace lm_finetune {

namespace data = xgrad::data;
namespace train = xgrad::train;

// The settings of the training part, saved in checkpoints (a program's Config derives from it).
struct Settings {
  std::string text, tokens;  // tokens: default --checkpoint + ".tok"
  int block_size = 128, batch_size = 4, warmup = 10, eval_interval = 50, eval_iters = 4;
  double lr = 1e-4, weight_decay = 0.1, clip = 1.0;
  std::uint64_t seed = 1337;
  bool random_init = false;  // random weights of the folder's config.json
};

// The flags of Settings.
inline void add_flags(CLI::App& app, train::Settings& settings, Settings& s) {
  namespace cli = xgrad::train::cli;
  const auto setting = [&](const std::string& flag, auto& value, const std::string& help) {
    return cli::add_setting(app, settings, flag, value, help);
  };
  setting("--text", s.text, "fine-tune on this text file (without it: --sample only)");
  setting("--tokens", s.tokens, "the token file the text is tokenized into (default: --checkpoint + .tok)");
  setting("--block-size", s.block_size, "context of the training windows, in tokens")
      ->check(cli::integer_in(1, 1 << 20));
  setting("--batch-size", s.batch_size, "windows per step")->check(cli::integer_in(1, 1 << 20));
  setting("--lr", s.lr, "peak learning rate (AdamW)")->check(cli::positive());
  setting("--weight-decay", s.weight_decay, "AdamW weight decay of the matrices")->check(cli::non_negative());
  setting("--warmup", s.warmup, "linear warmup steps, then cosine decay to lr / 10")->check(cli::integer_from(0));
  setting("--clip", s.clip, "max gradient norm")->check(cli::positive());
  setting("--eval-interval", s.eval_interval, "steps between evaluations")->check(cli::integer_in(1, 100000000));
  setting("--eval-iters", s.eval_iters, "held-out batches per evaluation")->check(cli::integer_in(1, 1000000));
  setting("--seed", s.seed, "seed of the batch order, dropout and sampling");
  cli::add_setting_flag(app, settings, "--random-init", s.random_init, "random weights of --hf's config.json");
}

// The token file of the run: --tokens, else beside the checkpoint (PROGRAM.tok without one).
inline std::string tokens_path(const Settings& s, const std::string& checkpoint, const std::string& program) {
  return !s.tokens.empty() ? s.tokens : (checkpoint.empty() ? program : checkpoint) + ".tok";
}

// What fit() leaves for after training.
struct Run {
  std::optional<int> stopped;  // the Trainer's: Ctrl-C (130) or --stop-at (0)
  std::shared_ptr<data::TokenWindowDataset> windows;
  std::size_t n_train = 0;                            // the held-out windows start there
  std::shared_ptr<xgrad::nn::Module<float>> trained;  // what the Trainer holds with frozen weights (LoRA)
};

// The token file s.tokens (made from s.text by `tok` unless a resumed run's is there; a file made
// here goes with made_tokens when the run fails), checked against the checkpoint's count and long
// enough for the windows: (tokens, n_train).
template <class Tokenizer>
std::pair<std::shared_ptr<const data::TokenFile>, std::size_t> token_file(const Settings& s, const Tokenizer& tok,
                                                                          std::uint64_t vocab,
                                                                          const xgrad::Checkpoint<float>* resumed,
                                                                          files::RemovedOnError& made_tokens) {
  if (!resumed || !std::filesystem::exists(s.tokens)) {
    made_tokens.path = s.tokens;
    bpe_text::tokenize(s.text, s.tokens, tok, vocab);
  }
  const auto tokens = std::make_shared<const data::TokenFile>(s.tokens);
  if (resumed && std::to_string(tokens->size()) != resumed->metadata.at("tokens"))
    throw train::Refused("--tokens " + s.tokens + " holds " + std::to_string(tokens->size()) +
                         " tokens, the checkpoint's " + resumed->metadata.at("tokens") +
                         ": tokenize again (delete it)");
  const std::size_t T = std::size_t(s.block_size), B = std::size_t(s.batch_size), n = tokens->size();
  const std::size_t n_val = std::max(n / 10, T + 1), n_train = n > n_val ? n - n_val : 0;
  if (n_train < T + B)
    throw train::Refused("--text " + s.text + " is too short: " + std::to_string(n) + " tokens; expected at least " +
                         std::to_string(T + B + std::max(n / 10, T + 1)) + " for --block-size " + std::to_string(T) +
                         " and --batch-size " + std::to_string(B) + " (a tenth held out)");
  return {tokens, n_train};
}

// The mean loss of eval_iters batches of windows spread evenly over the held-out tokens (the same
// each time), in eval mode without a graph.
template <class Model>
double held_out_loss(Model& model, const data::TokenWindowDataset& windows, std::size_t n_train, std::size_t n,
                     const Settings& s) {
  xgrad::NoGradGuard no_grad;
  model.eval();
  const std::size_t T = std::size_t(s.block_size), B = std::size_t(s.batch_size), n_val = n - n_train;
  double sum = 0;
  for (std::size_t i = 0, windows_in_all = std::size_t(s.eval_iters) * B; i < std::size_t(s.eval_iters); ++i) {
    std::vector<std::size_t> offsets;
    for (std::size_t j = 0; j < B; ++j)
      offsets.push_back(n_train + (i * B + j) * (n_val - T - 1) / std::max<std::size_t>(1, windows_in_all - 1));
    const data::TokenBatch batch = windows.batch(offsets);
    sum += double(train::lm_loss(model.forward(batch.x), batch.y).item());
  }
  model.train();
  return sum / s.eval_iters;
}

// Fine-tunes `model` on s.text through `tok` (ids below `vocab`) with `trainer`, after printing
// `model_line` (with the parameter count) and the run's summary; the step time and peak memory
// after. The checkpoints record the token count, checked on --resume.
template <class Model, class Tokenizer>
Run fit(train::Trainer& trainer, Model& model, const Settings& s, const Tokenizer& tok, std::uint64_t vocab,
        files::RemovedOnError& made_tokens, const std::string& model_line) {
  const auto file = token_file(s, tok, vocab, trainer.checkpoint(), made_tokens);
  const std::shared_ptr<const data::TokenFile>& tokens = file.first;
  const std::size_t n_train = file.second;
  const std::size_t T = std::size_t(s.block_size), B = std::size_t(s.batch_size), n = tokens->size();
  Run run{std::nullopt, std::make_shared<data::TokenWindowDataset>(tokens, T), n_train};
  auto loader = data::make_data_loader(
      run.windows, data::DataLoaderOptions().batch_size(B).drop_last(true).sampler(
                       std::make_shared<data::RandomSampler>(n_train - T, xgrad::Generator(s.seed + 1))));
  trainer.track("data_loader", loader);  // its position: saved in checkpoints, restored by fit()

  // With frozen weights (LoRA) the optimizer and the checkpoints hold only what trains.
  const auto all = model.parameters();
  run.trained = std::any_of(all.begin(), all.end(), [](const auto& p) { return !p.requires_grad(); })
                    ? xgrad::nn::trainable_view(static_cast<xgrad::nn::Module<float>&>(model))
                    : nullptr;
  xgrad::nn::Module<float>& trained = run.trained ? *run.trained : model;
  const auto adamw = xgrad::optim::AdamWOptions(s.lr).betas({0.9, 0.95}).weight_decay(s.weight_decay);
  xgrad::optim::AdamW<float> optimizer(xgrad::optim::weight_decay_groups(trained.parameters(), adamw), adamw);
  // Warmup (the planned run's), then cosine to lr / 10 at the last step (of an extended run too).
  const int warmup = std::min(s.warmup, trainer.planned_steps() - 1), iters = trainer.max_steps();
  xgrad::optim::LambdaLR<float> schedule(optimizer, xgrad::optim::warmup_cosine(warmup, iters, 0.1));
  const auto saver = std::make_shared<train::LambdaCallback>();
  saver->save_checkpoint = [n](train::Trainer&, std::map<std::string, std::string>& metadata) {
    metadata["tokens"] = std::to_string(n);
  };
  trainer.add_callback(saver);
  std::int64_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();
  std::printf(
      "%s, %lld parameters%s\n"
      "text: %s, %zu tokens in %s (%zu training, %zu held out) | tokenizer: %zu ids\n"
      "training: %d steps of %zu windows of %zu tokens, AdamW lr %g (warmup %d, cosine to %g), clip %g\n",
      model_line.c_str(), (long long)count, s.random_init ? " (random weights)" : "", s.text.c_str(), n,
      s.tokens.c_str(), n_train, n - n_train, std::size_t(tok.vocab_size()), iters, B, T, s.lr, warmup, s.lr / 10,
      s.clip);

  double last = -1, timed = 0;  // the step time: from a step's start to the next's, when no evaluation came between
  int timed_steps = 0;
  const auto step = [&](int) {
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    if (last >= 0) timed += now - last, ++timed_steps;
    last = now;
    auto batch = loader.next();
    if (!batch) batch = loader.next();  // the next epoch
    return train::lm_loss(model.forward(batch->x), batch->y);
  };
  const auto held_out = [&] {
    last = -1;
    return held_out_loss(model, *run.windows, n_train, n, s);
  };
  run.stopped = trainer.fit(trained, optimizer, &schedule, step, held_out);
  if (run.stopped) return run;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  if (timed_steps > 0)  // ru_maxrss: KiB
    std::printf("step time: %.3f s (mean of %d steps, evaluations excluded) | peak memory (RSS): %.0f MiB\n",
                timed / timed_steps, timed_steps, double(usage.ru_maxrss) / 1024.0);
  return run;
}

}  // namespace lm_finetune
