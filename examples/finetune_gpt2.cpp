// Fine-tunes a pretrained GPT-2 from a Hugging Face folder (config.json + model.safetensors) on a
// text file, samples from it with its tokenizer and writes it back as a Hugging Face folder. The
// text is tokenized once, streamed, into a memory-mapped token file (--tokens; its last tenth held
// out). AdamW, warmup then cosine decay to lr / 10, clipping; the loop, progress line, CSV,
// checkpoints and --resume (bit for bit) are xgrad::train::Trainer's. Every output path is checked
// before anything is read or trained. docs/finetune_gpt2.md, "Fine-tuning GPT-2", has the commands:
//
//   finetune_gpt2 --hf gpt2 --text input.txt --iters 200 --save-hf gpt2-tuned --sample 100 --prompt "The"
//   finetune_gpt2 --hf gpt2-tuned --sample 100 --prompt "The" --top-k 40     # sample only (no --text)
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/train/cli.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

#include "support/bpe_text.hpp"
#include "support/files.hpp"
#include "support/hf_gpt2_model.hpp"
#include "support/lm_finetune.hpp"
#include "support/output_paths.hpp"
#include "support/plot.hpp"
#include "support/sampling_flags.hpp"
#ifdef XGRAD_WITH_ONNX
#include "support/gpt_onnx.hpp"
#endif

namespace {

using Model = xgrad::models::GPT<float>;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;
using train::Refused;
using train::RunPath;

const char* const kProgram = "finetune_gpt2";

struct Config : lm_finetune::Settings {  // the settings, saved in checkpoints
  std::string hf, tokenizer;
  double dropout = 0.0;
};

struct Options {  // what is not a setting
  int iters = 200, sample = 0, train_tokenizer = 0;
  std::string prompt, save_hf, onnx, plot = "finetune_gpt2.png", profile;
  xgrad::SamplingOptions sampling;
};

// Every file of a fine-tuning or sampling run but the Trainer's, for output_paths::check.
std::vector<RunPath> run_files(const Config& c, const Options& o, const std::string& checkpoint,
                               const std::string& csv) {
  std::vector<RunPath> paths = {
      RunPath::input_folder("--hf", c.hf, output_paths::kHfFiles),
      RunPath::input("--text", c.text),
      RunPath::input_folder("--tokenizer", c.tokenizer, output_paths::kTokenizerFiles),
      RunPath::output("--tokens", c.text.empty() ? "" : lm_finetune::tokens_path(c, checkpoint, kProgram)),
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
  c.tokens = lm_finetune::tokens_path(c, checkpoint, kProgram);
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
  const std::string summary = "model: " + c.hf + ", " + std::to_string(config.n_layer) + " layers, n_embd " +
                              std::to_string(config.n_embd) + ", vocab " + std::to_string(config.vocab_size);
  const lm_finetune::Run done =
      lm_finetune::fit(trainer, model, c, tok, std::uint64_t(config.vocab_size), made_tokens, summary);
  if (done.stopped) return *done.stopped;
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
    gpt_onnx::export_model(model, done.windows->batch({done.n_train, done.n_train + 1}).x, o.onnx);
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
  setting("--tokenizer", c.tokenizer, "the tokenizer's folder (default: --hf's)");
  lm_finetune::add_flags(app, settings, c);
  setting("--dropout", c.dropout, "dropout probability while fine-tuning")->check(cli::number_in(0.0, 0.9));
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
