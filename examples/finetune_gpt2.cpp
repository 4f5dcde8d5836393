// Fine-tunes a pretrained GPT-2 from a Hugging Face folder (config.json + model.safetensors) on a
// text file, samples from it with its tokenizer and writes it back as a Hugging Face folder. The
// text is tokenized once, streamed, into a memory-mapped token file (--tokens; its last tenth held
// out). AdamW, warmup then cosine decay to lr / 10, clipping; the loop, progress line, CSV,
// checkpoints and --resume (bit for bit) are xgrad::train::Trainer's. Every output path is checked
// before anything is read or trained. docs/finetune_gpt2.md, "Fine-tuning GPT-2", has the commands:
//
//   finetune_gpt2 --hf gpt2 --text input.txt --iters 200 --save-hf gpt2-tuned --sample 100 --prompt "The"
//   finetune_gpt2 --hf gpt2-tuned --sample 100 --prompt "The" --top-k 40     # sample only (no --text)
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/data/token_file.hpp>
#include <xgrad/train/cli.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

#include "support/bpe_text.hpp"
#include "support/files.hpp"
#include "support/hf_gpt2_model.hpp"
#include "support/output_paths.hpp"
#include "support/plot.hpp"
#include "support/sampling_flags.hpp"
#ifdef XGRAD_WITH_ONNX
#include "support/gpt_onnx.hpp"
#endif

namespace {

using Model = xgrad::models::GPT<float>;
namespace data = xgrad::data;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;
using train::Refused;
using train::RunPath;

const char* const kProgram = "finetune_gpt2";

struct Config {                             // the settings, saved in checkpoints
  std::string hf, text, tokenizer, tokens;  // tokens: default --checkpoint + ".tok"
  int block_size = 128, batch_size = 4, warmup = 10, eval_interval = 50, eval_iters = 4;
  double lr = 1e-4, weight_decay = 0.1, clip = 1.0, dropout = 0.0;
  std::uint64_t seed = 1337;
  bool random_init = false;
};

struct Options {  // what is not a setting
  int iters = 200, sample = 0, train_tokenizer = 0;
  std::string prompt, save_hf, onnx, plot = "finetune_gpt2.png", profile;
  xgrad::SamplingOptions sampling;
};

// The token file of the run: --tokens, else beside the checkpoint.
std::string tokens_path(const Config& c, const std::string& checkpoint) {
  return !c.tokens.empty() ? c.tokens : (checkpoint.empty() ? std::string(kProgram) : checkpoint) + ".tok";
}

// Every file of a fine-tuning or sampling run but the Trainer's, for output_paths::check.
std::vector<RunPath> run_files(const Config& c, const Options& o, const std::string& checkpoint,
                               const std::string& csv) {
  std::vector<RunPath> paths = {RunPath::input_folder("--hf", c.hf, output_paths::kHfFiles),
                                RunPath::input("--text", c.text),
                                RunPath::input_folder("--tokenizer", c.tokenizer, output_paths::kTokenizerFiles),
                                RunPath::output("--tokens", c.text.empty() ? "" : tokens_path(c, checkpoint)),
                                output_paths::plot(o.plot, csv),
                                RunPath::output_folder("--save-hf", o.save_hf, {"config.json", "model.safetensors"}),
                                RunPath::output("--profile", o.profile)};
  for (RunPath& p : output_paths::onnx(o.onnx)) paths.push_back(std::move(p));
  return paths;
}

// --train-tokenizer N: its files checked, then a tokenizer of N ids trained on --text into --tokenizer.
int train_tokenizer(const Config& c, const Options& o) {
  output_paths::check({RunPath::input("--text", c.text),
                       RunPath::output_folder("--tokenizer", c.tokenizer, {"encoder.json", "vocab.bpe"}),
                       RunPath::output("--profile", o.profile)});
  const cli::ProfileRun profiling(o.profile);
  return bpe_text::train_command(c.text, c.tokenizer, std::size_t(o.train_tokenizer));
}

int run(Config& c, Options& o, const train::TrainerOptions& options, train::Settings& settings, const CLI::App& app) {
  if (o.train_tokenizer > 0) return train_tokenizer(c, o);
  // Every path, before anything is read or written: with the flags given, then (a resumed run's
  // settings are the checkpoint's) with the checkpoint's.
  const std::vector<RunPath> trainer_paths = train::run_paths(options);  // --resume, --checkpoint, --csv, ...
  output_paths::check(options, run_files(c, o, trainer_paths[1].path, trainer_paths[2].path));
  train::Trainer trainer(kProgram, options, settings, train::single_process_world(),
                         cli::given(app));  // c: the checkpoint's
  trainer.options().val_check_interval = c.eval_interval;
  trainer.options().gradient_clip_val = c.clip;
  const xgrad::Checkpoint<float>* resumed = trainer.checkpoint();
  if (c.hf.empty()) throw Refused("--hf: expected a Hugging Face GPT-2 folder (config.json, model.safetensors)");
  if (c.text.empty() && (o.sample == 0 || !o.save_hf.empty() || !o.onnx.empty()))
    throw Refused("expected --text FILE to fine-tune on (--save-hf, --export-onnx: after it), or --sample N");
  const std::string& checkpoint = trainer.options().checkpoint_path;
  output_paths::check(options, run_files(c, o, checkpoint, trainer.options().csv_path));
  c.tokens = tokens_path(c, checkpoint);
#ifndef XGRAD_WITH_ONNX
  if (!o.onnx.empty()) throw Refused("--export-onnx: this build has no ONNX export (XGRAD_WITH_ONNX is off)");
#endif
  if (!c.text.empty()) bpe_text::check_readable(c.text);
  const cli::ProfileRun profiling(o.profile);  // the paths checked: until run() returns
  xgrad::models::GPTConfig config = hf_gpt2_model::config(c.hf);
  if (c.block_size > config.block_size)
    throw Refused("--block-size " + std::to_string(c.block_size) + " is beyond the model's n_positions " +
                  std::to_string(config.block_size));
  const xgrad::text::BPETokenizer tok = c.tokenizer.empty() ? bpe_text::load("--hf", c.hf, " (pass --tokenizer DIR)")
                                                            : bpe_text::load("--tokenizer", c.tokenizer);
  if (std::int64_t(tok.vocab_size()) > config.vocab_size)
    throw Refused("the tokenizer has " + std::to_string(tok.vocab_size()) + " ids, beyond the model's vocab_size " +
                  std::to_string(config.vocab_size));
  config.dropout = c.dropout;
  xgrad::manual_seed(c.seed);
  Model model(config);
  if (!c.random_init && !resumed) hf_gpt2_model::load_weights(model, c.hf);  // a resumed run: the checkpoint's
  if (c.text.empty()) {                                                      // sample only
    std::printf("%s\n", bpe_text::sample(model, tok, o.prompt, o.sample, o.sampling, c.seed).c_str());
    return 0;
  }

  files::RemovedOnError made_tokens;  // a token file this run made goes when the run fails (a later run makes it again)
  if (!resumed || !std::filesystem::exists(c.tokens)) {
    made_tokens.path = c.tokens;
    bpe_text::tokenize(c.text, c.tokens, tok, std::uint64_t(config.vocab_size));
  }
  const auto tokens = std::make_shared<const data::TokenFile>(c.tokens);
  if (resumed && std::to_string(tokens->size()) != resumed->metadata.at("tokens"))
    throw Refused("--tokens " + c.tokens + " holds " + std::to_string(tokens->size()) + " tokens, the checkpoint's " +
                  resumed->metadata.at("tokens") + ": tokenize again (delete it)");
  const std::size_t T = std::size_t(c.block_size), B = std::size_t(c.batch_size), n = tokens->size();
  const std::size_t n_val = std::max(n / 10, T + 1), n_train = n > n_val ? n - n_val : 0;
  if (n_train < T + B)
    throw Refused("--text " + c.text + " is too short: " + std::to_string(n) + " tokens; expected at least " +
                  std::to_string(T + B + std::max(n / 10, T + 1)) + " for --block-size " + std::to_string(T) +
                  " and --batch-size " + std::to_string(B) + " (a tenth held out)");
  const auto windows = std::make_shared<data::TokenWindowDataset>(tokens, T);
  auto loader = data::make_data_loader(
      windows, data::DataLoaderOptions().batch_size(B).drop_last(true).sampler(
                   std::make_shared<data::RandomSampler>(n_train - T, xgrad::Generator(c.seed + 1))));
  trainer.track("data_loader", loader);  // its position: saved in checkpoints, restored by fit()

  const auto adamw = xgrad::optim::AdamWOptions(c.lr).betas({0.9, 0.95}).weight_decay(c.weight_decay);
  xgrad::optim::AdamW<float> optimizer(xgrad::optim::weight_decay_groups(model.parameters(), adamw), adamw);
  // Warmup (the planned run's), then cosine to lr / 10 at the last step (of an extended run too).
  const int warmup = std::min(c.warmup, trainer.planned_steps() - 1), iters = trainer.max_steps();
  xgrad::optim::LambdaLR<float> schedule(optimizer, xgrad::optim::warmup_cosine(warmup, iters, 0.1));
  const auto saver = std::make_shared<train::LambdaCallback>();
  saver->save_checkpoint = [&](train::Trainer&, std::map<std::string, std::string>& metadata) {
    metadata["tokens"] = std::to_string(n);
  };
  trainer.add_callback(saver);
  std::int64_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();
  std::printf(
      "model: %s, %lld layers, n_embd %lld, vocab %lld, %lld parameters%s\n"
      "text: %s, %zu tokens in %s (%zu training, %zu held out) | tokenizer: %zu ids\n"
      "training: %d steps of %zu windows of %zu tokens, AdamW lr %g (warmup %d, cosine to %g), clip %g\n",
      c.hf.c_str(), (long long)config.n_layer, (long long)config.n_embd, (long long)config.vocab_size, (long long)count,
      c.random_init ? " (random weights)" : "", c.text.c_str(), n, c.tokens.c_str(), n_train, n_val, tok.vocab_size(),
      iters, B, T, c.lr, warmup, c.lr / 10, c.clip);

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
    xgrad::NoGradGuard no_grad;
    model.eval();
    double sum = 0;  // eval_iters batches of windows spread evenly over the held-out tokens, the same each time
    for (std::size_t i = 0, windows_in_all = std::size_t(c.eval_iters) * B; i < std::size_t(c.eval_iters); ++i) {
      std::vector<std::size_t> offsets;
      for (std::size_t j = 0; j < B; ++j)
        offsets.push_back(n_train + (i * B + j) * (n_val - T - 1) / std::max<std::size_t>(1, windows_in_all - 1));
      const data::TokenBatch batch = windows->batch(offsets);
      sum += double(train::lm_loss(model.forward(batch.x), batch.y).item());
    }
    model.train();
    return sum / c.eval_iters;
  };
  if (const auto stopped = trainer.fit(model, optimizer, &schedule, step, held_out)) return *stopped;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  if (timed_steps > 0)  // ru_maxrss: KiB
    std::printf("step time: %.3f s (mean of %d steps, evaluations excluded) | peak memory (RSS): %.0f MiB\n",
                timed / timed_steps, timed_steps, double(usage.ru_maxrss) / 1024.0);
  if (o.sample > 0)
    std::printf("-- sample --\n%s\n", bpe_text::sample(model, tok, o.prompt, o.sample, o.sampling, c.seed).c_str());
  trainer.finish();
  plot::render(trainer.options().csv_path, o.plot, kProgram);
  if (!o.save_hf.empty()) {
    xgrad::models::save_hf_gpt2(model, o.save_hf);
    std::printf("saved the fine-tuned model to %s (config.json, model.safetensors)\n", o.save_hf.c_str());
  }
#ifdef XGRAD_WITH_ONNX
  if (!o.onnx.empty()) {
    gpt_onnx::export_model(model, windows->batch({n_train, n_train + 1}).x, o.onnx);
    std::printf("exported the model to %s (ONNX), inputs with their logits to %s.sample.json\n", o.onnx.c_str(),
                o.onnx.c_str());
  }
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Config c;
  Options o;
  train::Settings settings;
  train::TrainerOptions options;
  options.checkpoint_path = "finetune_gpt2.ckpt";
  options.csv_path = "finetune_gpt2.csv";
  options.num_threads = 2;
  options.metric = train::ValidationMetric::loss("val_loss", "nats/token");  // the CSV's column
  CLI::App app{"Fine-tunes a Hugging Face GPT-2 on a text file, samples from it and saves it back."};
  app.get_formatter()->column_width(44);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag overrides
  const auto setting = [&](const std::string& flag, auto& value, const std::string& help) {
    return cli::add_setting(app, settings, flag, value, help);
  };
  setting("--hf", c.hf, "the Hugging Face GPT-2 folder (config.json, model.safetensors)");
  setting("--text", c.text, "fine-tune on this text file (without it: --sample only)");
  setting("--tokenizer", c.tokenizer, "the tokenizer's folder (default: --hf's)");
  setting("--tokens", c.tokens, "the token file the text is tokenized into (default: --checkpoint + .tok)");
  setting("--block-size", c.block_size, "context of the training windows, in tokens")
      ->check(cli::integer_in(1, 1 << 20));
  setting("--batch-size", c.batch_size, "windows per step")->check(cli::integer_in(1, 1 << 20));
  setting("--lr", c.lr, "peak learning rate (AdamW)")->check(cli::positive());
  setting("--weight-decay", c.weight_decay, "AdamW weight decay of the matrices")->check(cli::non_negative());
  setting("--warmup", c.warmup, "linear warmup steps, then cosine decay to lr / 10")->check(cli::integer_from(0));
  setting("--clip", c.clip, "max gradient norm")->check(cli::positive());
  setting("--dropout", c.dropout, "dropout probability while fine-tuning")->check(cli::number_in(0.0, 0.9));
  setting("--eval-interval", c.eval_interval, "steps between evaluations")->check(cli::integer_in(1, 100000000));
  setting("--eval-iters", c.eval_iters, "held-out batches per evaluation")->check(cli::integer_in(1, 1000000));
  setting("--seed", c.seed, "seed of the batch order, dropout and sampling");
  cli::add_setting_flag(app, settings, "--random-init", c.random_init, "random weights of --hf's config.json");
  cli::add_max_steps_flag(app, o.iters, "--iters", "training steps");
  cli::add_trainer_flags(app, options);
  cli::add_profile_flag(app, o.profile);
  plot::add_flag(app, o.plot);
  app.add_option("--sample", o.sample, "generate N tokens after --prompt (after training, if any)")
      ->check(cli::integer_in(1, 1000000));
  app.add_option("--prompt", o.prompt, "the text --sample continues (default: <|endoftext|>)");
  sampling_flags::add(app, o.sampling);
  app.add_option("--save-hf", o.save_hf, "after training, write the model as a Hugging Face folder");
  app.add_option("--export-onnx", o.onnx,
                 "after training, export the model to this ONNX file; with --resume of a finished run and no "
                 "larger --iters: export it without training");
  app.add_option("--train-tokenizer", o.train_tokenizer, "train a BPE tokenizer of N ids on --text into --tokenizer")
      ->check(cli::integer_in(257, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  cli::finish_max_steps(app, options, "--iters", o.iters);
  return train::guarded(kProgram, [&] { return run(c, o, options, settings, app); });
}
