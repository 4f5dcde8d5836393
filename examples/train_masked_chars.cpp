// A BERT-style masked-character model on an English word list (/usr/share/dict/words from Debian's
// wamerican, or --words FILE): 15% of each word's letters (at least one) are chosen, 80% of those
// become [MASK], 10% a random letter, 10% stay, and the model predicts them from the rest:
//   word (B, L) -> tok_emb + pos_emb -> TransformerEncoder (pre-norm, GELU, key padding mask from
//   pad_collate) -> Linear(D, 28) -> cross_entropy on the chosen letters (ignore_index elsewhere)
// A seeded hash puts 10% of the words in the held-out set, never trained on; the others come through
// xgrad::data::DataLoader (shuffled, encoded and padded by --workers threads), whose position is in the
// checkpoint: --resume continues bit for bit; with a larger --steps it extends the run, the learning rate
// following from there the cosine of a run planned that long. --predict "h_llo w_rld" fills blanks.
// --export-onnx FILE writes the trained model as ONNX (xgrad::onnx::export_model).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <xtensor/xview.hpp>

#include <xgrad/train/cli.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

#include "support/files.hpp"
#include "support/plot.hpp"
#ifdef XGRAD_WITH_ONNX
#include "support/onnx_sample.hpp"
#endif

namespace {

using xgrad::IndexArray;
namespace nn = xgrad::nn;
namespace optim = xgrad::optim;
namespace data = xgrad::data;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;

constexpr std::int64_t kPad = 0, kMask = 1, kVocab = 28, kIgnore = -100;  // 'a'..'z' are 2..27

struct Config {
  std::string words = "/usr/share/dict/words";
  static constexpr int max_len = 16;  // longer words are skipped
  int d_model = 96, layers = 3, heads = 4, dim_feedforward = 256, steps = 4500, batch_size = 128;
  int warmup = 200, workers = 1, eval_interval = 500;
  double lr = 3e-3, weight_decay = 0.01, clip = 1.0, mask_prob = 0.15;
  std::uint64_t seed = 0;
};

// Lower-case ASCII letters only, 1 to max_len of them -> tokens (L); otherwise (0).
IndexArray encode(const std::string& word, int max_len, bool blanks = false) {
  IndexArray t = IndexArray::from_shape({word.size() <= std::size_t(max_len) ? word.size() : 0});
  for (std::size_t i = 0; i < t.size(); ++i) {
    const bool letter = word[i] >= 'a' && word[i] <= 'z', blank = blanks && word[i] == '_';
    if (!letter && !blank) return IndexArray::from_shape({0});
    t(i) = letter ? 2 + (word[i] - 'a') : kMask;
  }
  return t;
}

bool is_held_out(const std::string& word, std::uint64_t seed) {  // 10% of words, by FNV-1a + splitmix
  std::uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
  for (unsigned char ch : word) h = (h ^ ch) * 1099511628211ULL;
  return (((h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ULL) >> 29) % 10 == 0;
}

struct Masked {
  IndexArray inputs, targets;  // (B, L): the letters with some replaced; the chosen letters, kIgnore elsewhere
  xgrad::BoolArray padding;    // (B, L): true past each word's end
};

// eval: every chosen letter becomes [MASK] (the measured task); otherwise BERT's 80/10/10.
Masked mask_batch(const data::PaddedBatch<std::int64_t>& b, double p, xgrad::Generator& g, bool eval) {
  Masked m{b.padded, xt::full_like(b.padded, kIgnore), b.key_padding_mask};
  for (std::size_t i = 0; i < b.lengths.size(); ++i) {
    const std::size_t n = b.lengths[i], forced = g.next_u64() % n;  // at least one letter per word
    for (std::size_t t = 0; t < n; ++t) {
      if (!(g.uniform() < p) && t != forced) continue;
      m.targets(i, t) = b.padded(i, t);
      const double r = g.uniform();
      if (eval || r < 0.8) m.inputs(i, t) = kMask;
      else if (r < 0.9) m.inputs(i, t) = 2 + std::int64_t(g.next_u64() % 26);
    }
  }
  return m;
}

struct MaskedCharModel : nn::Module<float> {
  explicit MaskedCharModel(const Config& c) : Module("MaskedCharModel") {
    tok_emb = register_module("tok_emb", std::make_shared<nn::Embedding<float>>(kVocab, c.d_model));
    pos_emb = register_module("pos_emb", std::make_shared<nn::Embedding<float>>(c.max_len, c.d_model));
    const auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(
        nn::TransformerEncoderLayerOptions(c.d_model, c.heads).dim_feedforward(c.dim_feedforward).dropout(0.0)
            .activation("gelu").batch_first(true).norm_first(true));
    encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder<float>>(
        layer, c.layers, std::make_shared<nn::LayerNorm<float>>(c.d_model)));
    head = register_module("head", std::make_shared<nn::Linear<float>>(c.d_model, kVocab));
  }
  // tokens (B, L), padding (B, L) -> logits (B, L, 28)
  xgrad::Tensor<float> forward(const IndexArray& tokens, const xgrad::BoolArray& padding) {
    const IndexArray positions = xt::arange<std::int64_t>(std::int64_t(tokens.shape(1)));
    const xgrad::Tensor<float> x = tok_emb->forward(tokens) + pos_emb->forward(positions);  // (B, L, D) + (L, D)
    return head->forward(encoder->forward(x, {}, padding));
  }
  std::shared_ptr<nn::Embedding<float>> tok_emb, pos_emb;
  std::shared_ptr<nn::TransformerEncoder<float>> encoder;
  std::shared_ptr<nn::Linear<float>> head;
};

// Fraction of the chosen letters predicted right (argmax).
double accuracy(MaskedCharModel& model, const std::vector<Masked>& held_out) {
  xgrad::NoGradGuard no_grad;  // (no dropout in the model: train and eval mode agree)
  std::size_t right = 0, total = 0;
  for (const Masked& m : held_out) {
    const xgrad::Array<float> p = model.forward(m.inputs, m.padding).value();  // logits (B, L, 28)
    for (std::size_t i = 0; i < m.targets.size(); ++i) {
      const float* row = p.data() + i * kVocab;
      right += std::max_element(row, row + kVocab) - row == m.targets.data()[i];  // never kIgnore
      total += m.targets.data()[i] != kIgnore;
    }
  }
  return double(right) / double(total);
}

// Fills the blanks ('_') of each word with the checkpoint's model: the top 3 letters and their probabilities.
int predict(const std::string& text, train::RunOptions& run, train::Settings& settings, const CLI::App& app,
            const Config& c) {
  files::refuse_special("--checkpoint", run.checkpoint_path, "a checkpoint of train_masked_chars");
  if (!std::ifstream(run.checkpoint_path))  // a regular file or nothing: the open cannot block
    throw train::Refused("--predict: no checkpoint " + run.checkpoint_path +
                            ": train first, or pass --checkpoint FILE");
  run.resume_path = run.checkpoint_path;  // the model's settings come from the checkpoint
  const train::Resumed saved = train::prepare_run("train_masked_chars", run, settings, train::single_process_world(),
                                                  cli::given(app));  // sets c
  MaskedCharModel model(c);
  model.load_state_dict(saved.checkpoint->model);
  xgrad::NoGradGuard no_grad;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    const IndexArray tokens = encode(word, c.max_len, /*blanks=*/true);
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

#ifdef XGRAD_WITH_ONNX
// --export-onnx: word (batch, L) and its key padding mask (batch, L) -> logits (batch, L, 28), batch
// and L dynamic (the positions 0..L-1 the forward makes become a Range), and the sample: the 4
// shortest and the 6 longest words of the first held-out batch, each set padded to its longest word
// only (two lengths), with this program's logits.
void export_onnx(MaskedCharModel& model, const std::vector<Masked>& held_out, const std::string& path) {
  const Masked& m = held_out.front();
  const std::size_t n = m.inputs.shape(0), width = m.inputs.shape(1);
  std::vector<std::size_t> length(n, 0), by_length(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < width; ++j)
      if (!m.padding(i, j)) length[i] = j + 1;
  for (std::size_t i = 0; i < n; ++i) by_length[i] = i;
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](std::size_t a, std::size_t b) { return length[a] < length[b]; });
  const auto words = [&](std::vector<std::size_t> rows, bool trim) {  // padded to the longest of them when trim
    std::size_t cut = trim ? 1 : width;
    for (std::size_t i : rows) cut = std::max(cut, length[i]);
    IndexArray tokens = IndexArray::from_shape({rows.size(), cut});
    xgrad::BoolArray padding = xgrad::BoolArray::from_shape({rows.size(), cut});
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (std::size_t j = 0; j < cut; ++j) tokens(r, j) = m.inputs(rows[r], j), padding(r, j) = m.padding(rows[r], j);
    return std::make_pair(tokens, padding);
  };
  const auto example = words({0, std::min<std::size_t>(1, n - 1), std::min<std::size_t>(2, n - 1)}, false);
  xgrad::onnx::export_model(
      model,
      [&model](const xgrad::onnx::Inputs& in) {
        return std::vector<xgrad::Tensor<float>>{model.forward(in.indices(0), in.mask(1))};
      },
      {example.first, example.second}, path,
      xgrad::onnx::ExportOptions()
          .input_names({"tokens", "key_padding_mask"})
          .output_names({"logits"})
          .dynamic_axes({{"tokens", {{0, "batch"}, {1, "length"}}},
                         {"key_padding_mask", {{0, "batch"}, {1, "length"}}}}));
  xgrad::NoGradGuard no_grad;
  model.eval();
  std::vector<onnx_sample::Run> runs;
  const std::size_t few = std::min<std::size_t>(4, n), many = std::min<std::size_t>(6, n);
  for (const auto& [tokens, padding] :
       {words(std::vector<std::size_t>(by_length.begin(), by_length.begin() + few), true),
        words(std::vector<std::size_t>(by_length.end() - many, by_length.end()), true)})
    runs.push_back({{{"tokens", tokens}, {"key_padding_mask", padding}}, {{"logits", model.forward(tokens, padding)}}});
  model.train();
  onnx_sample::write(path, runs);
  std::printf("exported the trained model to %s (ONNX, opset 17), a sample to %s.sample.json\n", path.c_str(),
              path.c_str());
}
#endif

int train_model(Config& c, train::RunOptions& run, const std::string& plot_path, train::Settings& settings,
                const CLI::App& app, const std::string& onnx_path) {
#ifndef XGRAD_WITH_ONNX
  if (!onnx_path.empty()) throw train::Refused("--export-onnx: this build has no ONNX export (XGRAD_WITH_ONNX is off)");
#endif
  train::Resumed resumed =
      train::prepare_run("train_masked_chars", run, settings, train::single_process_world(), cli::given(app));
  const int planned = resumed.checkpoint ? std::stoi(resumed.checkpoint->metadata.at("steps")) : c.steps;
  if (!app.count("--steps")) c.steps = planned;  // a larger --steps extends the run
  if (c.steps < resumed.state.step)
    throw train::Refused("--steps " + std::to_string(c.steps) + " is below the checkpoint's step");
  files::refuse_special("--words", c.words, "a word list, one word per line");
  if (!std::ifstream(c.words))  // a regular file or nothing: the open cannot block
    throw train::Refused("no word list " + c.words + ": apt-get install wamerican, or pass --words FILE");
  // Lower-case a-z words of at most max_len letters, split by the hash of the word.
  const auto lines = std::make_shared<data::TextLineDataset>(c.words);
  std::vector<std::size_t> train_lines, held_lines, letter_counts(kVocab);
  for (std::size_t i = 0; i < lines->size(); ++i) {
    const IndexArray t = encode(lines->get(i), c.max_len);
    const bool held = is_held_out(lines->get(i), c.seed);
    if (t.size() > 0) (held ? held_lines : train_lines).push_back(i);
    for (std::int64_t x : t) letter_counts[std::size_t(x)] += !held;
  }
  std::printf("words: %zu training, %zu held out, %zu lines skipped (not lower-case a-z or longer than %d)\n",
              train_lines.size(), held_lines.size(), lines->size() - train_lines.size() - held_lines.size(), c.max_len);
  if (train_lines.size() < std::size_t(c.batch_size) || held_lines.empty())
    throw train::Refused(c.words + " has too few usable words: use a longer list or a smaller --batch-size");
  const auto collate = [max_len = c.max_len](const std::vector<std::string>& words) {  // on the worker threads
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
  xgrad::manual_seed(c.seed);
  MaskedCharModel model(c);
  optim::AdamW<float> optimizer(model.parameters(), optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  const int warmup = std::max(1, std::min(c.warmup, c.steps - 1));  // lr/100 up to lr, then cosine down to 0
  optim::SequentialLR<float> schedule(
      optimizer, {std::make_shared<optim::LinearLR<float>>(optimizer, 0.01, 1.0, warmup),
                  std::make_shared<optim::CosineAnnealingLR<float>>(optimizer, std::max(1, c.steps - warmup))},
      {warmup});
  auto loader = data::make_data_loader(std::make_shared<data::Subset<std::string>>(lines, train_lines),
                                       data::DataLoaderOptions().batch_size(std::size_t(c.batch_size)).shuffle(true)
                                           .drop_last(true).num_workers(std::size_t(c.workers))
                                           .generator(xgrad::Generator(c.seed + 1)),
                                       collate);
  if (resumed.checkpoint) {
    const data::DataLoaderState saved =
        data::DataLoaderState::from_string(resumed.checkpoint->metadata.at("data_loader"));
    if (saved.dataset_size != train_lines.size())
      throw train::Refused("cannot resume from " + run.resume_path +
                           ": it was made with another word list than the "
                           "one in " +
                           c.words + " now (changed since?): expected " + std::to_string(saved.dataset_size) +
                           " training words, got " + std::to_string(train_lines.size()) +
                           "; resume with the word list the checkpoint was "
                           "trained on, or start a new run without --resume");
    loader.load_state_dict(saved);
  }
  train::Trainer trainer("train_masked_chars", run, settings, std::move(resumed), model, optimizer, &schedule,
                         {c.steps, c.eval_interval, c.clip});
  if (const int done = trainer.first_step(); c.steps != planned && done > warmup)  // extended: the lr follows the
    optimizer.param_groups()[0].options().set_lr(  // cosine of a run planned for c.steps from the start
        c.lr * (1 + std::cos(M_PI * (done - warmup) / (c.steps - warmup))) / 2);
  const auto save_state = std::make_shared<train::LambdaCallback>();
  save_state->save_checkpoint = [&](train::Trainer&, std::map<std::string, std::string>& metadata) {
    metadata["data_loader"] = loader.state_dict().to_string();  // the loader's position
    metadata["steps"] = std::to_string(c.steps);                // not a setting: they may grow
  };
  trainer.add_callback(save_state);
  const auto loss = [&](int) {
    auto batch = loader.next();
    if (!batch) batch = loader.next();  // the next epoch
    const Masked m = mask_batch(*batch, c.mask_prob, xgrad::default_generator(), false);
    return xgrad::cross_entropy(xgrad::reshape(model.forward(m.inputs, m.padding), {-1, kVocab}),
                                IndexArray(xt::reshape_view(m.targets, {m.targets.size()})), kIgnore);
  };
  if (const auto stopped = trainer.fit(loss, [&] { return accuracy(model, held_out); })) return *stopped;
  const double acc = accuracy(model, held_out), baseline = double(baseline_right) / double(chosen);
  std::printf("\nheld-out masked-letter accuracy: %.2f%% of %zu masked letters in %zu words never trained on\n"
              "baseline, always '%c' (the most frequent training letter): %.2f%%; the model: %.1fx the baseline\n",
              100 * acc, chosen, held_lines.size(), char('a' + common - 2), 100 * baseline, acc / baseline);
  trainer.finish();
  plot::render(run.csv_path, plot_path);
#ifdef XGRAD_WITH_ONNX
  if (!onnx_path.empty()) export_onnx(model, held_out, onnx_path);
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line into a file or pipe too
  Config c;
  train::Settings settings;
  train::RunOptions run("masked_chars.ckpt", "masked_chars.csv");
  std::string plot_path = "masked_chars.png";
  std::string predict_text;
  CLI::App app{"Trains a BERT-style masked-character model on an English word list."};
  const auto setting = [&](const std::string& flag, auto& value, const std::string& help) {  // saved in checkpoints
    return cli::add_setting(app, settings, flag, value, help);
  };
  setting("--words", c.words, "one word per line (apt-get install wamerican for the default)")
      ->check(cli::not_special_file());
  setting("--d-model", c.d_model, "model width")->check(cli::integer_in(1, 4096));
  setting("--layers", c.layers, "encoder layers")->check(cli::integer_in(1, 64));
  setting("--heads", c.heads, "attention heads (dividing --d-model)")->check(cli::integer_in(1, 256));
  setting("--dim-feedforward", c.dim_feedforward, "feed-forward width")->check(cli::integer_in(1, 65536));
  app.add_option("--steps", c.steps, "training steps (with --resume: more extends the run)")->capture_default_str();
  setting("--batch-size", c.batch_size, "words per step")->check(cli::integer_in(1, 1000000));
  setting("--lr", c.lr, "peak learning rate (AdamW)")->check(cli::positive());
  setting("--warmup", c.warmup, "linear warmup steps, then cosine decay")->check(cli::integer_from(0));
  setting("--seed", c.seed, "seed of the weights, split, order and masks");
  app.add_option("--workers", c.workers, "DataLoader threads preparing batches")->capture_default_str();
  app.add_option("--eval-interval", c.eval_interval, "steps between evaluations")->check(cli::integer_from(1));
  cli::add_run_flags(app, run);
  std::string profile_path;
  cli::add_profile_flag(app, profile_path);
  plot::add_flag(app, plot_path);
  app.add_option("--predict", predict_text, "fill the blanks of words like \"h_llo w_rld\" with --checkpoint's model");
  std::string onnx_path;
  app.add_option("--export-onnx", onnx_path,
                 "after training, export the model to this ONNX file (and a sample of inputs with their outputs "
                 "to FILE.sample.json)")
      ->check(cli::not_special_file());
  CLI11_PARSE(app, argc, argv);
  const cli::ProfileRun profiling(profile_path);  // --profile: until main returns
  return train::guarded("train_masked_chars", [&] {
    return predict_text.empty() ? train_model(c, run, plot_path, settings, app, onnx_path)
                                : predict(predict_text, run, settings, app, c);
  });
}
