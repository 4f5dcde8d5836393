// A BERT-style masked-character model on an English word list (/usr/share/dict/words from Debian's
// wamerican, or --words FILE): 15% of each word's letters (at least one) are chosen, 80% of those
// become [MASK], 10% a random letter, 10% stay, and the model predicts them from the rest (the task
// and the model: support/masked_chars.hpp).
// A seeded hash puts 10% of the words in the held-out set, never trained on; the others come through
// xgrad::data::DataLoader (shuffled, encoded and padded by --workers threads), whose position is in the
// checkpoint. The run is xgrad::train::Trainer's: --resume continues bit for bit; with a larger --steps
// it extends the run, the learning rate following from there the cosine of a run planned that long;
// the CSV is step,loss,val_accuracy,lr,elapsed. --predict "h_llo w_rld" fills blanks.
// --export-onnx FILE writes the trained model as ONNX (xgrad::onnx::export_model); with --resume of a
// finished run and no larger --steps it exports that checkpoint without training (nor rewriting it).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <xgrad/train/cli.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

#include "support/files.hpp"
#include "support/masked_chars.hpp"
#include "support/output_paths.hpp"
#include "support/plot.hpp"

namespace {

using xgrad::IndexArray;
using namespace masked_chars;  // kVocab, encode, mask_batch, MaskedCharModel...
namespace data = xgrad::data;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;
using train::RunPath;

struct Config {  // the settings, saved in checkpoints
  std::string words = "/usr/share/dict/words";
  ModelOptions model;
  int batch_size = 128, warmup = 200;
  double lr = 3e-3, weight_decay = 0.01, clip = 1.0, mask_prob = 0.15;
  std::uint64_t seed = 0;
};

struct Options {  // what is not a setting
  int workers = 1, eval_interval = 500;
  std::string plot = "masked_chars.png", onnx, predict, profile;
};

// Fills the blanks ('_') of each word with the checkpoint's model: the top 3 letters and their probabilities.
int predict(const std::string& text, const train::TrainerOptions& options, train::Settings& settings,
            const CLI::App& app, const Config& c, const std::string& profile) {
  output_paths::check({RunPath::input("--checkpoint", options.checkpoint_path), RunPath::output("--profile", profile)});
  files::refuse_special("--checkpoint", options.checkpoint_path, "a checkpoint of train_masked_chars");
  if (!xgrad::is_readable_regular_file(options.checkpoint_path))
    throw train::Refused("--predict: no checkpoint " + options.checkpoint_path +
                         ": train first, or pass --checkpoint FILE");
  train::TrainerOptions read_only;  // the model's settings come from the checkpoint; nothing is written
  read_only.ckpt_path = options.checkpoint_path;
  const train::Trainer saved("train_masked_chars", read_only, settings, train::single_process_world(),
                             cli::given(app));  // sets c
  MaskedCharModel model(c.model);
  model.load_state_dict(saved.checkpoint()->model);
  const cli::ProfileRun profiling(profile);  // the paths checked: until predict() returns
  xgrad::NoGradGuard no_grad;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    const IndexArray tokens = encode(word, c.model.max_len, /*blanks=*/true);
    if (tokens.size() == 0)
      throw train::Refused("--predict: '" + word + "' is not 1 to 16 lower-case letters or _ (a blank)");
    const IndexArray one = xt::reshape_view(tokens, {std::size_t(1), tokens.size()});  // a batch of 1 word
    const xgrad::Array<float> p = xgrad::softmax(model.forward(one, xt::zeros<bool>(one.shape())), -1).value();
    for (std::size_t t = 0; t < word.size(); ++t) {
      if (word[t] != '_') continue;
      std::vector<float> row(p.data() + t * kVocab + 2, p.data() + (t + 1) * kVocab);  // 'a'..'z'
      std::printf("%s: blank %zu:", word.c_str(), t + 1);
      for (int k = 0; k < 3; ++k) {
        const auto best = std::max_element(row.begin(), row.end());
        std::printf("  %c %.3f%s", char('a' + (best - row.begin())), *best, k == 2 ? "\n" : "");
        *best = -1;
      }
    }
  }
  return 0;
}

// Every file of a training run but the Trainer's, for output_paths::check.
std::vector<RunPath> run_files(const Config& c, const Options& o, const std::string& csv) {
  std::vector<RunPath> paths = {RunPath::input("--words", c.words), output_paths::plot(o.plot, csv),
                                RunPath::output("--profile", o.profile)};
  for (RunPath& p : output_paths::onnx(o.onnx)) paths.push_back(std::move(p));
  return paths;
}

int train_model(Config& c, const train::TrainerOptions& options, const Options& o, train::Settings& settings,
                const CLI::App& app) {
  // Every path before anything is read or written: with the flags given, then (a resumed run's
  // settings are the checkpoint's) with the checkpoint's --words.
  output_paths::check(options, run_files(c, o, options.csv_path));
#ifndef XGRAD_WITH_ONNX
  if (!o.onnx.empty()) throw train::Refused("--export-onnx: this build has no ONNX export (XGRAD_WITH_ONNX is off)");
#endif
  train::Trainer trainer("train_masked_chars", options, settings, train::single_process_world(), cli::given(app));
  output_paths::check(options, run_files(c, o, options.csv_path));
  const cli::ProfileRun profiling(o.profile);  // the paths checked: until train_model() returns
  trainer.options().val_check_interval = o.eval_interval;
  trainer.options().gradient_clip_val = c.clip;
  files::refuse_special("--words", c.words, "a word list, one word per line");
  if (!xgrad::is_readable_regular_file(c.words))
    throw train::Refused("no word list " + c.words + ": apt-get install wamerican, or pass --words FILE");
  // Lower-case a-z words of at most max_len letters, split by the hash of the word.
  const int max_len = c.model.max_len;
  const auto lines = std::make_shared<data::TextLineDataset>(c.words);
  std::vector<std::size_t> train_lines, held_lines, letter_counts(kVocab);
  for (std::size_t i = 0; i < lines->size(); ++i) {
    const IndexArray t = encode(lines->get(i), max_len);
    const bool held = is_held_out(lines->get(i), c.seed);
    if (t.size() > 0) (held ? held_lines : train_lines).push_back(i);
    for (std::int64_t x : t) letter_counts[std::size_t(x)] += !held;
  }
  std::printf("words: %zu training, %zu held out, %zu lines skipped (not lower-case a-z or longer than %d)\n",
              train_lines.size(), held_lines.size(), lines->size() - train_lines.size() - held_lines.size(), max_len);
  if (train_lines.size() < std::size_t(c.batch_size) || held_lines.empty())
    throw train::Refused(c.words + " has too few usable words: use a longer list or a smaller --batch-size");
  const auto collate = [max_len](const std::vector<std::string>& words) {  // on the worker threads
    std::vector<IndexArray> tokens;
    for (const std::string& w : words) tokens.push_back(encode(w, max_len));
    return data::pad_collate<std::int64_t>(tokens, kPad);
  };
  // The held-out words, masked once by their own generator, and the baseline: always the most frequent letter.
  const auto common = std::max_element(letter_counts.begin(), letter_counts.end()) - letter_counts.begin();
  std::vector<Masked> held_out;
  xgrad::Generator eval_gen(c.seed ^ 0xE7A1D5EEDULL);
  std::size_t baseline_right = 0, chosen = 0;
  const auto held_set = std::make_shared<data::Subset<std::string>>(lines, held_lines);
  for (const auto& batch : data::make_data_loader(held_set, data::DataLoaderOptions().batch_size(512), collate)) {
    held_out.push_back(mask_batch(batch, c.mask_prob, eval_gen, true));
    for (std::int64_t y : held_out.back().targets) baseline_right += y == common, chosen += y != kIgnore;
  }
  trainer.seed_everything(c.seed);
  MaskedCharModel model(c.model);
  xgrad::optim::AdamW<float> optimizer(model.parameters(),
                                       xgrad::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  // lr/100 up to lr over the planned run's warmup (at least a step), then cosine down to 0.
  const int warmup = std::max(1, std::min(c.warmup, trainer.planned_steps() - 1));
  const auto lr_schedule = xgrad::optim::warmup_cosine_lr(optimizer, warmup, trainer.max_steps());
  auto loader = data::make_data_loader(std::make_shared<data::Subset<std::string>>(lines, train_lines),
                                       data::DataLoaderOptions()
                                           .batch_size(std::size_t(c.batch_size))
                                           .shuffle(true)
                                           .drop_last(true)
                                           .num_workers(std::size_t(o.workers))
                                           .generator(xgrad::Generator(c.seed + 1)),
                                       collate);
  trainer.track("data_loader", loader);  // its position: saved in checkpoints, restored by fit()
  const auto loss = [&](int) {
    auto batch = loader.next();
    if (!batch) batch = loader.next();  // the next epoch
    const Masked m = mask_batch(*batch, c.mask_prob, xgrad::default_generator(), false);
    return train::lm_loss(model.forward(m.inputs, m.padding), m.targets, kIgnore);  // (B, L, kVocab), (B, L)
  };
  const auto validation = [&] { return accuracy(model, held_out); };
  if (const auto stopped = trainer.fit(model, optimizer, lr_schedule.get(), loss, validation)) return *stopped;
  const double acc = accuracy(model, held_out), baseline = double(baseline_right) / double(chosen);
  std::printf("\nheld-out masked-letter accuracy: %.2f%% of %zu masked letters in %zu words never trained on\n"
              "baseline, always '%c' (the most frequent training letter): %.2f%%; the model: %.1fx the baseline\n",
              100 * acc, chosen, held_lines.size(), char('a' + common - 2), 100 * baseline, acc / baseline);
  trainer.finish();
  plot::render(trainer.options().csv_path, o.plot, "train_masked_chars");
#ifdef XGRAD_WITH_ONNX
  if (!o.onnx.empty()) export_onnx(model, held_out, o.onnx);
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line into a file or pipe too
  Config c;
  Options o;
  int steps = 4500;
  train::Settings settings;
  train::TrainerOptions options;  // the CSV's metric: val_accuracy
  options.checkpoint_path = "masked_chars.ckpt";
  options.csv_path = "masked_chars.csv";
  CLI::App app{"Trains a BERT-style masked-character model on an English word list."};
  const auto setting = [&](const std::string& flag, auto& value, const std::string& help) {  // saved in checkpoints
    return cli::add_setting(app, settings, flag, value, help);
  };
  setting("--words", c.words, "one word per line (apt-get install wamerican for the default)")
      ->check(cli::not_special_file());
  setting("--d-model", c.model.d_model, "model width")->check(cli::integer_in(1, 4096));
  setting("--layers", c.model.layers, "encoder layers")->check(cli::integer_in(1, 64));
  setting("--heads", c.model.heads, "attention heads (dividing --d-model)")->check(cli::integer_in(1, 256));
  setting("--dim-feedforward", c.model.dim_feedforward, "feed-forward width")->check(cli::integer_in(1, 65536));
  cli::add_max_steps_flag(app, steps, "--steps", "training steps");
  setting("--batch-size", c.batch_size, "words per step")->check(cli::integer_in(1, 1000000));
  setting("--lr", c.lr, "peak learning rate (AdamW)")->check(cli::positive());
  setting("--warmup", c.warmup, "linear warmup steps, then cosine decay")->check(cli::integer_from(0));
  setting("--seed", c.seed, "seed of the weights, split, order and masks");
  app.add_option("--workers", o.workers, "DataLoader threads preparing batches")->capture_default_str();
  app.add_option("--eval-interval", o.eval_interval, "steps between evaluations")->check(cli::integer_from(1));
  cli::add_trainer_flags(app, options);
  cli::add_profile_flag(app, o.profile);
  plot::add_flag(app, o.plot);
  app.add_option("--predict", o.predict, "fill the blanks of words like \"h_llo w_rld\" with --checkpoint's model");
  app.add_option("--export-onnx", o.onnx,
                 "after training, export the model to this ONNX file (and a sample of inputs with their outputs "
                 "to FILE.sample.json); with --resume of a finished run and no larger --steps: export it without "
                 "training")
      ->check(cli::not_special_file());
  CLI11_PARSE(app, argc, argv);
  cli::finish_max_steps(app, options, "--steps", steps);
  return train::guarded("train_masked_chars", [&] {
    return o.predict.empty() ? train_model(c, options, o, settings, app)
                             : predict(o.predict, options, settings, app, c, o.profile);
  });
}
