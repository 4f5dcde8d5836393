// A GPT (xgrad::models::GPT, nanoGPT's model) trained on the King James Bible, then sampled from.
// The text comes from Debian's bible-kjv at run time (`COLUMNS=1000 bible "gen1:1-rev22:21"`:
// 31,102 verses, their references stripped), or from any UTF-8 file with --text FILE (split by
// lines). A seeded hash holds out 1 verse (line) in 10, never trained on. --tokenizer char: one
// token per character of the training text; --tokenizer bpe --vocab-size N: GPT-2's byte-level
// BPE trained (deterministically) on the training text. The tokenizer is saved beside the
// checkpoint (CHECKPOINT.tokenizer.json), which --resume and --sample read back.
//
//   text -> token files (CHECKPOINT.train.tok, .val.tok; memory-mapped) -> windows of --block-size
//   tokens (x) and the same shifted by one (y) at random offsets -> GPT -> logits -> cross_entropy
//
// AdamW (betas 0.9, 0.99; weight decay 0.1 on the matrices only, as nanoGPT), linear warmup then
// cosine decay to --min-lr, gradient clipping. The held-out loss is measured at each evaluation on
// fixed windows spread over the held-out tokens, in nats per token and in bits per character:
// nats per token x held-out tokens / held-out characters / ln 2 (the same for characters). The
// loop, progress line, CSV, checkpoints, --resume (bit for bit) and extension with a larger
// --iters are xgrad::train::Trainer's. Under `mpirun -np N` every rank draws the same global batch
// and trains on its N-th of the rows (DistributedDataParallel averages the gradients).
//
//   build/release/examples/train_gpt                          # about 5 minutes on 2 cores
//   build/release/examples/train_gpt --tokenizer bpe --vocab-size 1024
//   build/release/examples/train_gpt --sample "In the beginning" --temperature 0.8 --top-k 40
//
// --attention tiled|materialized picks the attention kernel (auto: tiled from 256 positions).
// --export-onnx FILE (characters) writes the model as ONNX, FILE.vocab.json and FILE.sample.json.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/train/cli.hpp>
#include <xgrad/train/data_parallel.hpp>
#include <xgrad/xgrad.hpp>

#include "support/files.hpp"
#include "support/gpt_text.hpp"
#include "support/hf_gpt2_model.hpp"
#include "support/plot.hpp"
#include "support/sampling_flags.hpp"
#ifdef XGRAD_WITH_ONNX
#include "support/gpt_onnx.hpp"
#endif

namespace {

using xgrad::IndexArray;
using Model = xgrad::models::GPT<float>;
namespace data = xgrad::data;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;
using train::Refused;

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

// --sample: text from the model of --checkpoint, through the tokenizer saved beside it.
int sample(const Config& c, const Sampling& s, const std::string& checkpoint, train::Settings& settings,
           const CLI::App& app) {
  files::refuse_special("--checkpoint", checkpoint, "a checkpoint of train_gpt");
  if (!std::ifstream(checkpoint))  // a regular file or nothing: the open cannot block
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
  xgrad::Generator generator(s.seed);
  std::printf("%s\n", gpt_text::sample(model, tok, prompt, s.tokens, s.window, s.options, generator).c_str());
  return 0;
}

int train_model(Config& c, const Sampling& sampling, train::TrainerOptions& options, const std::string& plot_path,
                train::Settings& settings, const CLI::App& app, train::World& world, const std::string& onnx_path) {
  train::check_output_file("--export-onnx", onnx_path);  // before training, as the Trainer's own paths
  train::Trainer trainer(kProgram, options, settings, world, cli::given(app));  // c: the checkpoint's
  trainer.options().val_check_interval = c.eval_interval;
  trainer.options().gradient_clip_val = c.clip;
  const auto refuse_if = [](bool bad, const std::string& why) { if (bad) throw Refused(why); };
  refuse_if(c.n_embd % c.n_head != 0, "--n-head " + std::to_string(c.n_head) + " must divide --n-embd " +
                                          std::to_string(c.n_embd));
  refuse_if(c.batch_size % world.size() != 0, "--batch-size " + std::to_string(c.batch_size) +
                                                  " must be divisible by the " + std::to_string(world.size()) + " ranks");
  refuse_if(sampling.window > c.block_size, "--window " + std::to_string(sampling.window) + " is beyond --block-size " +
                                                std::to_string(c.block_size));
  refuse_if(c.min_lr > c.lr, "--min-lr " + std::to_string(c.min_lr) + " must be at most --lr " + std::to_string(c.lr));
  refuse_if(app.count("--vocab-size") && c.tokenizer == "char",
            "--vocab-size is for --tokenizer bpe: a character vocabulary is the training text's characters");
#ifndef XGRAD_WITH_ONNX
  refuse_if(!onnx_path.empty(), "--export-onnx: this build has no ONNX export (XGRAD_WITH_ONNX is off)");
#endif
  refuse_if(!onnx_path.empty() && c.block_size < 4,  // the export traces two lengths, both within the context
            "--export-onnx needs --block-size 4 or more (the sequence axis is exported dynamic), got " +
                std::to_string(c.block_size));
  refuse_if(!onnx_path.empty() && c.tokenizer != "char",
            "--export-onnx writes a character vocabulary (for examples/onnx/gpt_sample.mjs): use --tokenizer char");

  const auto* resumed = trainer.checkpoint();
  const std::string& checkpoint = trainer.options().checkpoint_path;
  const auto saved = resumed ? resumed->metadata : std::map<std::string, std::string>{};
  const auto tokenizer = resumed ? std::make_shared<xgrad::text::Tokenizer>(
                                       gpt_text::saved_tokenizer(trainer.options().ckpt_path, saved))
                                 : nullptr;
  const gpt_text::Text t = gpt_text::read(
      c.text, c.seed, c.tokenizer, std::size_t(c.vocab_size), tokenizer,
      (checkpoint.empty() ? std::string(kProgram) : checkpoint) + (world.rank() ? ".rank" + std::to_string(world.rank()) : ""));
  const std::size_t T = std::size_t(c.block_size), B = std::size_t(c.batch_size);
  if (resumed)
    gpt_text::check_same_text(t, T, data::DataLoaderState::from_string(saved.at("data_loader")).dataset_size,
                              saved.count("text_hash") ? saved.at("text_hash") : "", trainer.options().ckpt_path);
  refuse_if(t.train->size() < T + 1 + B || t.held->size() < T + 1,
            t.source + " is too short for --block-size " + std::to_string(T) + ": " + std::to_string(t.train->size()) +
                " training and " + std::to_string(t.held->size()) + " held-out " + t.unit() + "; expected more than " +
                std::to_string(T + 1 + B) + " and " + std::to_string(T + 1));
  trainer.seed_everything(c.seed);
  const auto model_ptr = std::make_shared<Model>(model_config(c, t.tokenizer->vocab_size()));
  Model& model = *model_ptr;
  if (!c.init_weights.empty()) files::load_weights("--init-weights", c.init_weights, model);
  const train::DataParallel<Model> forward(model_ptr, world);  // DDP over several ranks
  auto optimizer = hf_gpt2_model::adamw(model, c.lr, c.weight_decay, {0.9, 0.99});
  const int warmup = std::max(0, std::min(c.warmup, trainer.planned_steps() - 1)), steps = trainer.max_steps();
  xgrad::optim::LambdaLR<float> schedule(optimizer, [&c, warmup, steps](int step) {
    return hf_gpt2_model::lr_factor(step, warmup, steps, c.min_lr / c.lr);
  });

  // Windows at random offsets of the training tokens (drawn with replacement: nothing per window).
  const auto windows = std::make_shared<data::TokenWindowDataset>(t.train, T);
  const data::TokenWindowDataset held(t.held, T);
  auto loader = data::make_data_loader(
      windows, data::DataLoaderOptions().batch_size(B).drop_last(true).sampler(std::make_shared<data::RandomSampler>(
                   windows->size(), xgrad::Generator(c.seed + 1), /*replacement=*/true, B * 1000)));
  if (resumed) loader.load_state_dict(data::DataLoaderState::from_string(saved.at("data_loader")));
  trainer.options().metric.format = [&t](double loss) { return gpt_text::describe_loss(t, loss); };
  const auto save_state = std::make_shared<train::LambdaCallback>();
  save_state->save_checkpoint = [&](train::Trainer&, std::map<std::string, std::string>& metadata) {
    metadata["data_loader"] = loader.state_dict().to_string();
    metadata["text_hash"] = t.hash;                  // for --resume
    metadata["tokenizer"] = t.tokenizer->to_json();  // when the file beside the checkpoint is missing
    if (world.is_main()) t.tokenizer->save(gpt_text::tokenizer_path(checkpoint));  // for --resume, --sample
  };
  trainer.add_callback(save_state);

  std::int64_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();
  if (world.is_main()) {
    gpt_text::describe(t);
    std::printf("model: %d layers, %d heads, n_embd %d, context %d, %lld parameters | training: %d iterations of %d "
                "windows, AdamW lr %g (warmup %d, cosine to %g), clip %g | %s\n",
                c.n_layer, c.n_head, c.n_embd, c.block_size, (long long)count, steps, c.batch_size, c.lr, warmup,
                c.min_lr, c.clip, train::precision_description(c.bf16).c_str());
  }
  const auto step = [&](int) {
    auto batch = loader.next();
    if (!batch) batch = loader.next();  // the next epoch
    const data::TokenBatch mine = gpt_text::rows_of_rank(*batch, world);
    xgrad::AutocastGuard autocast(c.bf16);
    return gpt_text::lm_loss(forward(mine.x), mine.y);
  };
  const auto evaluate = [&] { return gpt_text::held_out_loss(model, held, B, c.eval_iters, c.bf16, world); };
  if (const auto stopped = trainer.fit(model, optimizer, &schedule, step, evaluate)) return *stopped;
  if (!world.is_main()) return 0;
  gpt_text::report(t, trainer.state().val_metric());
  xgrad::Generator generator(sampling.seed);  // three samples, each from a new line (nanoGPT's sample.py)
  for (int i = 1; i <= 3; ++i)
    std::printf("\n-- sample %d (temperature %g%s%s) --%s\n", i, sampling.options.temperature,
                sampling.options.top_k > 0 ? (", top-k " + std::to_string(sampling.options.top_k)).c_str() : "",
                sampling.options.top_p < 1 ? (", top-p " + std::to_string(sampling.options.top_p)).c_str() : "",
                gpt_text::sample(model, *t.tokenizer, gpt_text::encode_prompt(*t.tokenizer, "\n"), 200,
                                 sampling.window, sampling.options, generator).c_str());
  trainer.finish();
  plot::render(trainer.options().csv_path, plot_path);
#ifdef XGRAD_WITH_ONNX
  if (!onnx_path.empty()) {  // windows of the held-out text at two batch sizes and lengths
    gpt_onnx::export_model(model, gpt_text::spread(held, 2, std::min<std::size_t>(T, 8)), onnx_path,
                           {gpt_text::spread(held, 2, T), gpt_text::spread(held, 3, std::max<std::size_t>(1, T / 2 - 1))});
    gpt_text::write_vocab_json(*t.tokenizer->as_char(), c.block_size, onnx_path + ".vocab.json");
    std::printf("exported the trained model to %s (ONNX, opset 17), its vocabulary to %s.vocab.json, a sample to "
                "%s.sample.json\n", onnx_path.c_str(), onnx_path.c_str(), onnx_path.c_str());
  }
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
  setting("--tokenizer", c.tokenizer, "char (one token per character) or bpe (byte-level BPE trained on the text)")
      ->check(CLI::IsMember({"char", "bpe"}));
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
  setting("--eval-interval", c.eval_interval, "steps between evaluations (and CSV rows)")
      ->check(cli::integer_in(1, 100000000));
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
  app.add_option("--tokens", sampling.tokens, "tokens --sample generates")->check(cli::integer_in(1, 1000000))
      ->capture_default_str();
  app.add_option("--window", sampling.window, "past the context, keep generating from the last W tokens; 0: refuse "
                                              "going past it (default: the context length)")
      ->check(cli::integer_in(0, 65536));
  app.add_option("--attention", attention, "attention kernel: auto (tiled from 256 causal positions), tiled (memory "
                                           "linear in --block-size) or materialized (quadratic; for comparison)")
      ->check(CLI::IsMember({"auto", "tiled", "materialized"}))->capture_default_str();
  app.add_option("--export-onnx", onnx_path, "after training, export the model to this ONNX file (with "
                                             "FILE.vocab.json and FILE.sample.json: inputs and their logits)")
      ->check(cli::not_special_file());
  CLI11_PARSE(app, argc, argv);
  cli::finish_max_steps(app, options, "--iters", c.iters);
  const cli::ProfileRun profiling(profile_path);  // --profile: until main returns
  xgrad::set_attention_path(attention == "tiled"          ? xgrad::AttentionPath::Tiled
                            : attention == "materialized" ? xgrad::AttentionPath::Materialized
                                                          : xgrad::AttentionPath::Auto);
  if (app.count("--seed") > 0) sampling.seed = c.seed;  // --sample draws from its own --seed (default 1)
  const std::unique_ptr<train::World> world = train::launched_world();  // MPI under mpirun -np N > 1
  return train::guarded(kProgram, [&] {
    if (sampling.prompt.empty() && app.count("--sample") == 0)
      return train_model(c, sampling, options, plot_path, settings, app, *world, onnx_path);
    if (!onnx_path.empty()) throw Refused("--export-onnx exports after training, not with --sample");
    return sample(c, sampling, options.checkpoint_path, settings, app);
  }, *world);
}
