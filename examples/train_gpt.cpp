// A GPT (xgrad::models::GPT, nanoGPT's model) trained on the King James Bible, then sampled from.
// The text: Debian's bible-kjv read at run time (31,102 verses, references stripped), or a UTF-8
// file (--text FILE, by lines); 1 line in 10 held out by a seeded hash (xgrad/text/corpus.hpp).
// --tokenizer char: a token per character of the training text; --tokenizer bpe --vocab-size N:
// GPT-2's byte-level BPE trained on it; --tokenizer FILE: a tokenizer file read as it is (one this
// program saved, GPT-2's tokenizer.json or any BPE tokenizer.json of Hugging Face, such as Llama
// 3's). The tokenizer is saved beside the checkpoint
// (CHECKPOINT.tokenizer.json) for --resume and --sample; both parts are tokenized into
// memory-mapped token files (CHECKPOINT.train.tok, .val.tok), from which windows of --block-size
// tokens are drawn at random offsets. AdamW (betas 0.9, 0.99, weight decay on the matrices only),
// warmup then cosine to --min-lr, clipping. The held-out loss, on fixed windows, is reported in
// nats per token and bits per character (x held-out tokens / characters / ln 2). The run (CSV,
// checkpoints, --resume bit for bit, a larger --iters extending it, mpirun -np N) is
// xgrad::train::Trainer's; docs/examples.md has the commands and numbers.
//
//   build/release/examples/train_gpt [--tokenizer bpe --vocab-size 1024]     # about 5 minutes on 2 cores
//   build/release/examples/train_gpt --sample "In the beginning" --temperature 0.8 --top-k 40
#include <cstdio>
#include <fstream>
#include <string>

#include <xgrad/train/cli.hpp>
#include <xgrad/train/data_parallel.hpp>
#include <xgrad/xgrad.hpp>

#include "support/files.hpp"
#include "support/gpt_text.hpp"
#include "support/output_paths.hpp"
#include "support/plot.hpp"
#include "support/sampling_flags.hpp"

namespace {

using xgrad::IndexArray;
using Model = xgrad::models::GPT<float>;
namespace data = xgrad::data;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;
using train::Refused;
using train::RunPath;

const char* const kProgram = "train_gpt";

struct Config {  // the settings, saved in checkpoints (--resume rebuilds the same run from them)
  std::string text, tokenizer = "char";  // text empty: the King James Bible
  int vocab_size = 1024, n_layer = 4, n_head = 4, n_embd = 128, block_size = 64, batch_size = 12;
  double dropout = 0.0, lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0;
  int warmup = 100, iters = 2000, eval_interval = 250, eval_iters = 20;
  std::uint64_t seed = 1337;
  std::string init_weights;  // safetensors of the same model to start from (benchmarks/gpt_compare.py)
  bool bf16 = false;
};

struct Sampling {  // --sample, and the three samples at the end of training
  std::string prompt;
  xgrad::SamplingOptions options;
  int tokens = 300, window = -1;  // window: context kept past block_size; -1: block_size, 0: none
  std::uint64_t seed = 1;
};

xgrad::models::GPTConfig model_config(const Config& c, std::size_t vocab_size) {
  xgrad::models::GPTConfig g;
  g.vocab_size = std::int64_t(vocab_size), g.block_size = c.block_size, g.n_layer = c.n_layer;
  g.n_head = c.n_head, g.n_embd = c.n_embd, g.dropout = c.dropout;
  return g;
}

// The files of a run beside its checkpoint (and rank r > 0's beside its own): PREFIX.train.tok,
// PREFIX.val.tok.
std::string token_prefix(const std::string& checkpoint, const train::World& world) {
  return (checkpoint.empty() ? std::string(kProgram) : checkpoint) +
         (world.rank() ? ".rank" + std::to_string(world.rank()) : "");
}

// Every file of a training run but the Trainer's, for output_paths::check.
std::vector<RunPath> run_files(const Config& c, const train::TrainerOptions& resolved, const std::string& plot_path,
                               const std::string& onnx_path, const std::string& profile_path,
                               const train::World& world) {
  const std::string prefix = token_prefix(resolved.checkpoint_path, world);
  const std::string& resume = resolved.ckpt_path;
  std::vector<RunPath> paths = {
      RunPath::input("--text", c.text),
      RunPath::input("--tokenizer", gpt_text::is_tokenizer_file(c.tokenizer) ? c.tokenizer : ""),
      RunPath::input("--init-weights", c.init_weights),
      RunPath::input("the tokenizer file of --resume", resume.empty() ? "" : gpt_text::tokenizer_path(resume)),
      RunPath::output("the tokenizer file of --checkpoint",
                      resolved.checkpoint_path.empty() ? "" : gpt_text::tokenizer_path(resolved.checkpoint_path))
          .may_replace("the tokenizer file of --resume"),
      RunPath::output("the training token file of --checkpoint", prefix + ".train.tok"),
      RunPath::output("the held-out token file of --checkpoint", prefix + ".val.tok"),
      output_paths::plot(plot_path, resolved.csv_path),
      RunPath::output("--profile", profile_path)};
  for (RunPath& p : output_paths::onnx(onnx_path, {".vocab.json", ".sample.json"})) paths.push_back(std::move(p));
  return paths;
}

// The Trainer's options with their paths resolved as the Trainer resolves them (run_paths).
train::TrainerOptions resolved_paths(train::TrainerOptions o) {
  const std::vector<RunPath> paths = train::run_paths(o);  // --resume, --checkpoint, --csv, --save-weights
  o.ckpt_path = paths[0].path, o.checkpoint_path = paths[1].path, o.csv_path = paths[2].path;
  return o;
}

// --sample: text from the model of --checkpoint, through the tokenizer saved beside it.
int sample(const Config& c, const Sampling& s, const std::string& checkpoint, train::Settings& settings,
           const CLI::App& app, const std::string& profile_path) {
  output_paths::check({RunPath::input("--checkpoint", checkpoint),
                       RunPath::input("the tokenizer file of --checkpoint", gpt_text::tokenizer_path(checkpoint)),
                       RunPath::output("--profile", profile_path)});
  files::refuse_special("--checkpoint", checkpoint, "a checkpoint of train_gpt");
  if (!xgrad::is_readable_regular_file(checkpoint))
    throw Refused("--sample: no checkpoint " + checkpoint + ": train first, or pass --checkpoint FILE");
  train::TrainerOptions read;  // the model's settings come from the checkpoint; nothing is written
  read.ckpt_path = checkpoint;
  read.enable_checkpointing = false;
  const auto given = cli::given(app);
  const train::Trainer saved(kProgram, read, settings, train::single_process_world(),
                             [&](const std::string& key) { return key != "seed" && given(key); });
  const xgrad::text::Tokenizer tok = gpt_text::saved_tokenizer(checkpoint, saved.checkpoint()->metadata);
  const IndexArray prompt = gpt_text::encode_prompt(tok, s.prompt);
  if (s.window > c.block_size)
    throw Refused("--window " + std::to_string(s.window) + " is beyond the model's context of " +
                  std::to_string(c.block_size) + ": expected 0 to " + std::to_string(c.block_size));
  Model model(model_config(c, tok.vocab_size()));
  model.load_state_dict(saved.checkpoint()->model);
  const cli::ProfileRun profiling(profile_path);  // the paths checked: until sample() returns
  xgrad::Generator generator(s.seed);
  std::printf("%s\n", gpt_text::sample(model, tok, prompt, s.tokens, s.window, s.options, generator).c_str());
  return 0;
}

int train_model(Config& c, const Sampling& sampling, train::TrainerOptions& options, const std::string& plot_path,
                train::Settings& settings, const CLI::App& app, train::World& world, const std::string& onnx_path,
                const std::string& profile_path) {
  // Every path before anything is read or written: with the flags given, then (a resumed run's
  // settings are the checkpoint's) with the checkpoint's.
  output_paths::check(options, run_files(c, resolved_paths(options), plot_path, onnx_path, profile_path, world));
  train::Trainer trainer(kProgram, options, settings, world, cli::given(app));  // c: the checkpoint's
  output_paths::check(options, run_files(c, trainer.options(), plot_path, onnx_path, profile_path, world));
  const cli::ProfileRun profiling(profile_path);  // the paths checked: until train_model() returns
  trainer.options().val_check_interval = c.eval_interval;
  trainer.options().gradient_clip_val = c.clip;
  const auto refuse_if = [](bool bad, const std::string& why) {
    if (bad) throw Refused(why);
  };
  refuse_if(c.n_embd % c.n_head != 0,
            "--n-head " + std::to_string(c.n_head) + " must divide --n-embd " + std::to_string(c.n_embd));
  refuse_if(c.batch_size % world.size() != 0, "--batch-size " + std::to_string(c.batch_size) +
                                                  " must be divisible by the " + std::to_string(world.size()) +
                                                  " ranks");
  refuse_if(sampling.window > c.block_size,
            "--window " + std::to_string(sampling.window) + " is beyond --block-size " + std::to_string(c.block_size));
  refuse_if(c.min_lr > c.lr, "--min-lr " + std::to_string(c.min_lr) + " must be at most --lr " + std::to_string(c.lr));
  refuse_if(app.count("--vocab-size") && c.tokenizer == "char",
            "--vocab-size is for --tokenizer bpe: a character vocabulary is the training text's characters");
  refuse_if(app.count("--vocab-size") && gpt_text::is_tokenizer_file(c.tokenizer),
            "--vocab-size is for --tokenizer bpe: the tokenizer file " + c.tokenizer + " has its own vocabulary");

  gpt_text::check_export(onnx_path, c.block_size, c.tokenizer);
  const auto* resumed = trainer.checkpoint();
  const std::string& checkpoint = trainer.options().checkpoint_path;
  const std::size_t T = std::size_t(c.block_size), B = std::size_t(c.batch_size);
  const gpt_text::Text t = gpt_text::read_for_run(c.text, c.seed, c.tokenizer, std::size_t(c.vocab_size), T, B, resumed,
                                                  trainer.options().ckpt_path, token_prefix(checkpoint, world));
  trainer.seed_everything(c.seed);
  const auto model_ptr = std::make_shared<Model>(model_config(c, t.tokenizer->vocab_size()));
  Model& model = *model_ptr;
  if (!c.init_weights.empty()) files::load_weights("--init-weights", c.init_weights, model);
  const train::DataParallel<Model> forward(model_ptr, world);  // DDP over several ranks
  const auto adamw = xgrad::optim::AdamWOptions(c.lr).betas({0.9, 0.99}).weight_decay(c.weight_decay);
  xgrad::optim::AdamW<float> optimizer(xgrad::optim::weight_decay_groups(model.parameters(), adamw), adamw);
  const int warmup = std::max(0, std::min(c.warmup, trainer.planned_steps() - 1)), steps = trainer.max_steps();
  xgrad::optim::LambdaLR<float> schedule(optimizer, xgrad::optim::warmup_cosine(warmup, steps, c.min_lr / c.lr));

  // Windows at random offsets of the training tokens (drawn with replacement: nothing per window).
  const auto windows = std::make_shared<data::TokenWindowDataset>(t.train, T);
  const data::TokenWindowDataset held(t.held, T);
  const auto sampler =
      std::make_shared<data::RandomSampler>(windows->size(), xgrad::Generator(c.seed + 1), true, B * 1000);
  auto loader =
      data::make_data_loader(windows, data::DataLoaderOptions().batch_size(B).drop_last(true).sampler(sampler));
  trainer.track("data_loader", loader);  // its position: saved in checkpoints, restored by fit()
  trainer.options().metric.format = [&t](double loss) { return gpt_text::describe_loss(t, loss); };
  const auto save_state = std::make_shared<train::LambdaCallback>();
  save_state->save_checkpoint = [&](train::Trainer&, std::map<std::string, std::string>& metadata) {
    metadata["text_hash"] = t.hash;                  // for --resume
    metadata["tokenizer"] = t.tokenizer->to_json();  // when the file beside the checkpoint is missing
    if (world.is_main()) t.tokenizer->save(gpt_text::tokenizer_path(checkpoint));  // for --resume, --sample
  };
  trainer.add_callback(save_state);

  std::int64_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();
  if (world.is_main()) {
    gpt_text::describe(t);
    std::printf(
        "model: %d layers, %d heads, n_embd %d, context %d, %lld parameters | training: %d iterations of %d "
        "windows, AdamW lr %g (warmup %d, cosine to %g), clip %g | %s\n",
        c.n_layer, c.n_head, c.n_embd, c.block_size, (long long)count, steps, c.batch_size, c.lr, warmup, c.min_lr,
        c.clip, train::precision_description(c.bf16).c_str());
    if (world.size() > 1)
      std::printf("data parallel: %d ranks, %d windows each per step\n", world.size(), c.batch_size / world.size());
  }
  const auto step = [&](int) {
    auto batch = loader.next();
    if (!batch) batch = loader.next();  // the next epoch
    const data::TokenBatch mine = gpt_text::rows_of_rank(*batch, world);
    xgrad::AutocastGuard autocast(c.bf16);
    return train::lm_loss(forward(mine.x), mine.y);
  };
  const auto evaluate = [&] { return gpt_text::held_out_loss(model, held, B, c.eval_iters, c.bf16, world); };
  if (const auto stopped = trainer.fit(model, optimizer, &schedule, step, evaluate)) return *stopped;
  if (!world.is_main()) return 0;
  gpt_text::report(t, trainer.state().val_metric);
  gpt_text::print_samples(model, *t.tokenizer, sampling.options, sampling.window, sampling.seed);
  trainer.finish();
  plot::render(trainer.options().csv_path, plot_path);
#ifdef XGRAD_WITH_ONNX
  if (!onnx_path.empty()) gpt_text::export_onnx(model, held, *t.tokenizer->as_char(), onnx_path);
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Config c;
  train::Settings settings;
  train::TrainerOptions options;
  options.checkpoint_path = "gpt.ckpt", options.csv_path = "gpt.csv", options.num_threads = 2;
  options.metric.column = "val_loss";
  std::string plot_path = "gpt.png", profile_path, attention = "auto", onnx_path;
  Sampling sampling;
  sampling.options.temperature = 0.8;

  CLI::App app{"Trains a GPT on the King James Bible (or --text FILE) by characters or BPE tokens, then samples."};
  app.get_formatter()->column_width(44);
  const auto setting = [&](const std::string& flag, auto& value, const std::string& help) {  // saved in checkpoints
    return cli::add_setting(app, settings, flag, value, help);
  };
  setting("--text", c.text, "train on this UTF-8 text file (split by lines) instead of the Bible")
      ->check(cli::not_special_file());
  setting("--tokenizer", c.tokenizer,
          "char (one token per character), bpe (byte-level BPE trained on the text) or a tokenizer file "
          "(a BPE tokenizer.json of Hugging Face)")
      ->check(cli::not_special_file());
  setting("--vocab-size", c.vocab_size, "--tokenizer bpe: ids in all, 256 bytes and <|endoftext|> included")
      ->check(cli::integer_in(257, 65536));
  setting("--n-layer", c.n_layer, "transformer blocks")->check(cli::integer_in(1, 64));
  setting("--n-head", c.n_head, "attention heads (dividing --n-embd)")->check(cli::integer_in(1, 256));
  setting("--n-embd", c.n_embd, "model width")->check(cli::integer_in(1, 4096));
  setting("--block-size", c.block_size, "context length in tokens")->check(cli::integer_in(1, 65536));
  setting("--batch-size", c.batch_size, "windows per step")->check(cli::integer_in(1, 1000000));
  setting("--dropout", c.dropout, "dropout probability")->check(cli::number_in(0.0, 0.9));
  setting("--lr", c.lr, "peak learning rate (AdamW)")->check(cli::positive());
  setting("--min-lr", c.min_lr, "learning rate at the end of the cosine decay")->check(cli::non_negative());
  setting("--weight-decay", c.weight_decay, "AdamW weight decay of the matrices")->check(cli::non_negative());
  setting("--warmup", c.warmup, "linear warmup steps, then cosine decay")->check(cli::integer_from(0));
  setting("--clip", c.clip, "max gradient norm")->check(cli::positive());
  cli::add_max_steps_flag(app, c.iters, "--iters", "training steps")->check(cli::integer_in(1, 100000000));
  setting("--eval-interval", c.eval_interval, "steps between evaluations")->check(cli::integer_in(1, 100000000));
  setting("--eval-iters", c.eval_iters, "held-out batches per evaluation")->check(cli::integer_in(1, 1000000));
  setting("--seed", c.seed, "seed of the split, the weights, the batch order and dropout");
  setting("--init-weights", c.init_weights, "start from these weights (safetensors of the same model)")
      ->check(cli::not_special_file());
  cli::add_bf16_flag(app, settings, c.bf16);
  cli::add_trainer_flags(app, options);
  cli::add_profile_flag(app, profile_path);
  plot::add_flag(app, plot_path);
  app.add_option("--sample", sampling.prompt, "print a continuation of this prompt by --checkpoint's model");
  sampling_flags::add(app, sampling.options, "tokens");
  sampling_flags::add_length(app, sampling.tokens, sampling.window);
  gpt_text::add_attention_flag(app, attention);
  app.add_option("--export-onnx", onnx_path,
                 "after training, export the model to this ONNX file (with "
                 "FILE.vocab.json and FILE.sample.json: inputs and their logits)")
      ->check(cli::not_special_file());
  CLI11_PARSE(app, argc, argv);
  cli::finish_max_steps(app, options, "--iters", c.iters);
  gpt_text::set_attention(attention);
  if (app.count("--seed") > 0) sampling.seed = c.seed;  // --sample draws from its own --seed (default 1)
  const std::unique_ptr<train::World> world = train::launched_world();  // MPI under mpirun -np N > 1
  return train::guarded(
      kProgram,
      [&] {
        if (sampling.prompt.empty() && app.count("--sample") == 0)
          return train_model(c, sampling, options, plot_path, settings, app, *world, onnx_path, profile_path);
        if (!onnx_path.empty()) throw Refused("--export-onnx exports after training, not with --sample");
        return sample(c, sampling, options.checkpoint_path, settings, app, profile_path);
      },
      *world);
}
