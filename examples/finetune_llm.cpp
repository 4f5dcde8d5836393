// Fine-tunes a pretrained Llama-family model (model_type llama, qwen2 or mistral: Llama 2 and 3,
// SmolLM2, TinyLlama, Qwen2, Mistral) from a Hugging Face folder on a text file, samples from it
// and writes it back as a Hugging Face folder. The text goes through the folder's tokenizer.json
// (or --tokenizer FILE) into a memory-mapped token file (--tokens; its last tenth held out). The
// training part is finetune_gpt2's (support/lm_finetune.hpp): AdamW, warmup then cosine decay to
// lr / 10, clipping, and the Trainer's loop, CSV, checkpoints and --resume (bit for bit). Every
// output path is checked before anything is read or trained. docs/finetune_llm.md has the commands:
//
//   finetune_llm --hf SmolLM2-135M --text input.txt --iters 200 --save-hf tuned --sample 100 --prompt "The"
//   finetune_llm --hf tuned --sample 100 --prompt "The" --top-k 40     # sample only (no --text)
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/train/cli.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

#include "support/bpe_text.hpp"
#include "support/files.hpp"
#include "support/hf_llama_model.hpp"
#include "support/lora_flags.hpp"
#include "support/lm_finetune.hpp"
#include "support/output_paths.hpp"
#include "support/plot.hpp"
#include "support/sampling_flags.hpp"

namespace {

namespace train = xgrad::train;
namespace cli = xgrad::train::cli;
using train::Refused;
using train::RunPath;

const char* const kProgram = "finetune_llm";
// The files save_hf_llama writes, and those a Llama folder may hold that xgrad reads.
const std::vector<std::string> kSavedFiles = {"config.json", "generation_config.json", "model.safetensors"};

struct Config : lm_finetune::Settings {  // the settings, saved in checkpoints
  std::string hf, tokenizer;             // tokenizer: default --hf's tokenizer.json
  lora_flags::Settings lora;
};

struct Options {  // what is not a setting
  int iters = 200, sample = 0;
  bool gradient_checkpointing = false;  // the same gradients with less memory: not a setting
  std::string prompt, save_hf, plot = "finetune_llm.png", profile;
  xgrad::SamplingOptions sampling;
  lora_flags::Outputs lora;
};

std::vector<std::string> hf_files() {
  std::vector<std::string> files = output_paths::kHfFiles;
  files.push_back("generation_config.json");
  return files;
}

// Every file of a fine-tuning or sampling run but the Trainer's, for output_paths::check.
std::vector<RunPath> run_files(const Config& c, const Options& o, const std::string& checkpoint,
                               const std::string& csv) {
  std::vector<RunPath> paths = lora_flags::paths(c.lora, o.lora);
  const std::vector<RunPath> own = {
      RunPath::input_folder("--hf", c.hf, hf_files()),
      RunPath::input("--text", c.text),
      RunPath::input("--tokenizer", c.tokenizer),
      RunPath::output("--tokens", c.text.empty() ? "" : lm_finetune::tokens_path(c, checkpoint, kProgram)),
      output_paths::plot(o.plot, csv),
      RunPath::output_folder("--save-hf", o.save_hf, kSavedFiles),
      RunPath::output("--profile", o.profile)};
  paths.insert(paths.end(), own.begin(), own.end());
  return paths;
}

// The longest context the model computes exactly: max_position_embeddings, or a shorter sliding
// window (xgrad's attention is full causal attention).
std::int64_t context_of(const xgrad::models::LlamaConfig& config) {
  return std::min(config.max_position_embeddings, config.sliding_window.value_or(config.max_position_embeddings));
}

void check_lengths(const Config& c, const Options& o, std::size_t prompt_tokens, std::int64_t context) {
  if (!c.text.empty() && c.block_size > context)
    throw Refused("--block-size " + std::to_string(c.block_size) + " is beyond the model's context of " +
                  std::to_string(context) + " tokens (max_position_embeddings, sliding_window)");
  if (o.sample > 0 && std::int64_t(prompt_tokens) + o.sample > context)
    throw Refused("--sample " + std::to_string(o.sample) + " after the prompt's " + std::to_string(prompt_tokens) +
                  " tokens goes beyond the model's context of " + std::to_string(context) + " tokens");
}

int run(Config& c, Options& o, const train::TrainerOptions& options, train::Settings& settings, const CLI::App& app) {
  // Every path, before anything is read or written: with the flags given, then (a resumed run's
  // settings are the checkpoint's) with the checkpoint's.
  const std::vector<RunPath> trainer_paths = train::run_paths(options);  // --resume, --checkpoint, --csv, ...
  output_paths::check(options, run_files(c, o, trainer_paths[1].path, trainer_paths[2].path));
  train::Trainer trainer(kProgram, options, settings, train::single_process_world(),
                         cli::given(app));  // c: the checkpoint's
  trainer.options().val_check_interval = c.eval_interval;
  trainer.options().gradient_clip_val = c.clip;
  const bool resumed = trainer.checkpoint() != nullptr;
  if (c.hf.empty())
    throw Refused("--hf: expected a Hugging Face Llama-family folder (config.json, model.safetensors, tokenizer.json)");
  if (c.text.empty() && ((o.sample == 0 && !o.lora.any()) || !o.save_hf.empty()))
    throw Refused("expected --text FILE to fine-tune on (--save-hf: after it), or --sample N");
  const std::string& checkpoint = trainer.options().checkpoint_path;
  output_paths::check(options, run_files(c, o, checkpoint, trainer.options().csv_path));
  c.tokens = lm_finetune::tokens_path(c, checkpoint, kProgram);
  if (!c.text.empty()) bpe_text::check_readable(c.text);
  const cli::ProfileRun profiling(o.profile);  // the paths checked: until run() returns
  const xgrad::models::LlamaConfig config = hf_llama_model::config(c.hf);
  const xgrad::text::Tokenizer tok =
      c.tokenizer.empty() ? hf_llama_model::tokenizer("--hf", c.hf + "/tokenizer.json", config.vocab_size)
                          : hf_llama_model::tokenizer("--tokenizer", c.tokenizer, config.vocab_size);
  const std::vector<std::int64_t> prompt =
      o.sample > 0 ? hf_llama_model::prompt_ids(tok, o.prompt, config) : std::vector<std::int64_t>{};
  check_lengths(c, o, prompt.size(), context_of(config));
  xgrad::manual_seed(c.seed);
  // A resumed run's weights are the checkpoint's, but for LoRA's frozen ones (the folder's).
  const auto model = hf_llama_model::load(c.hf, c.random_init || (resumed && c.lora.r == 0 && c.lora.adapter.empty()));
  const auto lora = lora_flags::apply(*model, c.lora, o.lora);
  if (c.text.empty()) {  // sample only (and merge or convert --adapter)
    if (o.sample > 0)
      std::printf("%s\n", hf_llama_model::sample(*model, tok, prompt, o.sample, o.sampling, c.seed).c_str());
    lora_flags::save(*model, lora, o.lora, c.hf);
    return 0;
  }

  if (o.gradient_checkpointing) model->gradient_checkpointing_enable();
  files::RemovedOnError made_tokens;  // a token file this run made goes when the run fails (a later run makes it again)
  const std::string summary = "model: " + c.hf + " (" + config.model_type + "), " +
                              std::to_string(config.num_hidden_layers) + " layers, hidden " +
                              std::to_string(config.hidden_size) + ", vocab " + std::to_string(config.vocab_size);
  const lm_finetune::Run done =
      lm_finetune::fit(trainer, *model, c, tok, std::uint64_t(config.vocab_size), made_tokens, summary);
  if (done.stopped) return *done.stopped;
  if (o.sample > 0)
    std::printf("-- sample --\n%s\n",
                hf_llama_model::sample(*model, tok, prompt, o.sample, o.sampling, c.seed).c_str());
  trainer.finish();
  plot::render(trainer.options().csv_path, o.plot, kProgram);
  if (!o.save_hf.empty()) {
    lora ? xgrad::models::merge_and_save_hf_llama(*model, o.save_hf)  // a plain folder: LoRA merged
         : xgrad::models::save_hf_llama(*model, o.save_hf);
    std::printf(
        "saved the fine-tuned model to %s (config.json, generation_config.json when --hf has one, "
        "model.safetensors)\n",
        o.save_hf.c_str());
  }
  lora_flags::save(*model, lora, o.lora, c.hf);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Config c;
  Options o;
  train::Settings settings;
  train::TrainerOptions options;
  options.checkpoint_path = "finetune_llm.ckpt";
  options.csv_path = "finetune_llm.csv";
  options.num_threads = 2;
  options.metric = train::ValidationMetric::loss("val_loss", "nats/token");  // the CSV's column
  CLI::App app{"Fine-tunes a Hugging Face Llama-family model on a text file, samples from it and saves it back."};
  app.get_formatter()->column_width(44);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag overrides
  cli::add_setting(app, settings, "--hf", c.hf,
                   "the Hugging Face folder (config.json of model_type llama, qwen2 or mistral, model.safetensors)");
  cli::add_setting(app, settings, "--tokenizer", c.tokenizer, "the tokenizer.json (default: --hf's)");
  lm_finetune::add_flags(app, settings, c);
  cli::add_max_steps_flag(app, o.iters, "--iters", "training steps");
  cli::add_trainer_flags(app, options);
  cli::add_profile_flag(app, o.profile);
  plot::add_flag(app, o.plot);
  app.add_option("--sample", o.sample, "generate N tokens after --prompt (after training, if any)")
      ->check(cli::integer_in(1, 1000000));
  app.add_option("--prompt", o.prompt, "the text --sample continues (with the tokenizer's BOS; default: BOS alone)");
  sampling_flags::add(app, o.sampling);
  app.add_flag("--gradient-checkpointing", o.gradient_checkpointing,
               "recompute each layer's activations in the backward: less memory, about a third more time");
  app.add_option("--save-hf", o.save_hf, "after training, write the model as a Hugging Face folder");
  lora_flags::add_flags(app, settings, c.lora, o.lora);
  CLI11_PARSE(app, argc, argv);
  cli::finish_max_steps(app, options, "--iters", o.iters);
  return train::guarded(kProgram, [&] { return run(c, o, options, settings, app); });
}
