// A BERT-style masked-character model trained on an English word list (/usr/share/dict/words,
// Debian's wamerican; --words FILE for any file of one word per line). 15% of each word's letters
// (at least one) are chosen; of those 80% become [MASK], 10% a random letter, 10% stay; the model
// predicts the chosen letters from the rest of the word.
//
//   word (B, L) -> tok_emb + pos_emb (B, L, D) -> TransformerEncoder (pre-norm, GELU, final
//   LayerNorm, key padding mask from pad_collate) -> head Linear(D, 28) -> cross_entropy on the
//   chosen letters only (ignore_index elsewhere)
//
// Words are split into training and held-out by a seeded hash of the word: no held-out word is
// ever trained on. The training words come through xgrad::data::DataLoader (shuffled, padded by
// pad_collate, prepared by --workers threads); its position is saved in the checkpoint, so
// --resume continues bit for bit. --resume CKPT --steps N with N beyond the checkpoint's steps
// extends the run: the warmup is kept and the cosine decay is stretched to reach 0 at the new last
// step, continuing from the learning rate reached. --predict "h_llo w_rld" fills the blanks.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <type_traits>

#include <CLI/CLI.hpp>

#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/xgrad.hpp>

namespace {

using xgrad::IndexArray;
using xgrad::Tensor;
namespace nn = xgrad::nn;
namespace data = xgrad::data;

constexpr std::int64_t kPad = 0, kMask = 1, kVocab = 28, kIgnore = -100;  // 'a'..'z' are 2..27

struct Config {  // everything that defines the run; saved in the checkpoint as "config.<flag>"
  int max_len = 16, d_model = 96, layers = 3, heads = 4, dim_feedforward = 256, steps = 2500, batch_size = 128;
  int warmup = 150, workers = 1, threads = 2, eval_interval = 250;
  double lr = 3e-3, weight_decay = 0.01, clip = 1.0, mask_prob = 0.15;
  std::uint64_t seed = 0;
  // f(flag name, field, help) for every field.
  template <class F>
  void visit(F&& f) {
    f("max-len", max_len, "longest word kept (letters)"), f("d-model", d_model, "model width");
    f("layers", layers, "encoder layers"), f("heads", heads, "attention heads (must divide --d-model)");
    f("dim-feedforward", dim_feedforward, "feed-forward width"), f("steps", steps, "training steps");
    f("batch-size", batch_size, "words per step"), f("warmup", warmup, "linear warmup steps, then cosine decay");
    f("workers", workers, "DataLoader threads preparing batches"), f("threads", threads, "xgrad::set_num_threads");
    f("eval-interval", eval_interval, "steps between evaluations"), f("lr", lr, "peak learning rate (AdamW)");
    f("weight-decay", weight_decay, "AdamW weight decay"), f("clip", clip, "max gradient norm");
    f("mask-prob", mask_prob, "fraction of letters masked"), f("seed", seed, "seed of weights, split, order, masks");
  }
  std::map<std::string, std::string> to_map() {
    std::map<std::string, std::string> m;
    visit([&](const char* k, auto& v, const char*) { m[std::string("config.") + k] = exact(v); });
    return m;
  }
  void from_map(const std::map<std::string, std::string>& m) {  // throws std::out_of_range if one is missing
    visit([&](const char* k, auto& v, const char*) { v = static_cast<std::decay_t<decltype(v)>>(std::strtod(m.at(std::string("config.") + k).c_str(), nullptr)); });
  }
  static std::string exact(double v) {  // hexadecimal: reads back to the same bits
    char buf[40];
    std::snprintf(buf, sizeof buf, "%a", v);
    return buf;
  }
  static std::string exact(int v) { return std::to_string(v); }
  static std::string exact(std::uint64_t v) { return std::to_string(v); }
};

// Lower-case ASCII letters only, 1 to max_len of them -> tokens (L); otherwise (0).
IndexArray encode(const std::string& word, int max_len, bool blanks = false) {
  const IndexArray none = IndexArray::from_shape({0});
  if (word.empty() || word.size() > std::size_t(max_len)) return none;
  IndexArray t = IndexArray::from_shape({word.size()});
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (blanks && word[i] == '_') t(i) = kMask;
    else if (word[i] >= 'a' && word[i] <= 'z') t(i) = 2 + (word[i] - 'a');
    else return none;
  }
  return t;
}

bool is_held_out(const std::string& word, std::uint64_t seed) {  // 10% of words, by FNV-1a + splitmix
  std::uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
  for (unsigned char ch : word) h = (h ^ ch) * 1099511628211ULL;
  h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ULL;
  return (h ^ (h >> 29)) % 10 == 0;
}

class Words : public data::Dataset<IndexArray> {  // each word's tokens
 public:
  std::vector<IndexArray> words;
  std::size_t size() const override { return words.size(); }
  IndexArray get(std::size_t i) const override { return words.at(i); }
};

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

class MaskedCharModel : public nn::Module<float> {
 public:
  explicit MaskedCharModel(const Config& c) : Module("MaskedCharModel") {
    tok_emb = register_module("tok_emb", std::make_shared<nn::Embedding<float>>(kVocab, c.d_model));
    pos_emb = register_module("pos_emb", std::make_shared<nn::Embedding<float>>(c.max_len, c.d_model));
    const auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(
        nn::TransformerEncoderLayerOptions(c.d_model, c.heads).dim_feedforward(c.dim_feedforward).dropout(0.0)
            .activation("gelu").batch_first(true).norm_first(true));
    encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder<float>>(
        layer, c.layers, std::make_shared<nn::LayerNorm<float>>(std::size_t(c.d_model))));
    head = register_module("head", std::make_shared<nn::Linear<float>>(c.d_model, kVocab));
  }
  // tokens (B, L), padding (B, L) -> logits (B, L, 28)
  Tensor<float> forward(const IndexArray& tokens, const xgrad::BoolArray& padding) {
    const IndexArray positions = xt::arange<std::int64_t>(std::int64_t(tokens.shape(1)));
    const Tensor<float> x = tok_emb->forward(tokens) + pos_emb->forward(positions);  // (B, L, D) + (L, D)
    return head->forward(encoder->forward(x, {}, padding));
  }
  std::shared_ptr<nn::Embedding<float>> tok_emb, pos_emb;
  std::shared_ptr<nn::TransformerEncoder<float>> encoder;
  std::shared_ptr<nn::Linear<float>> head;
};

// Softmax probabilities (B, L, 28) in eval mode without a graph.
xgrad::Array<float> probabilities(MaskedCharModel& model, const IndexArray& inputs, const xgrad::BoolArray& padding) {
  xgrad::NoGradGuard no_grad;
  model.eval();
  xgrad::Array<float> p = xgrad::softmax(model.forward(inputs, padding), -1).value();
  model.train();
  return p;
}

// Fraction of the chosen letters predicted right (argmax).
double accuracy(MaskedCharModel& model, const std::vector<Masked>& held_out) {
  std::size_t right = 0, total = 0;
  for (const Masked& m : held_out) {
    const xgrad::Array<float> p = probabilities(model, m.inputs, m.padding);
    for (std::size_t i = 0; i < m.targets.size(); ++i) {
      if (m.targets.data()[i] == kIgnore) continue;
      const float* row = p.data() + i * kVocab;
      right += std::max_element(row, row + kVocab) - row == m.targets.data()[i];
      ++total;
    }
  }
  return double(right) / double(total);
}

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) {  // a second Ctrl-C ends the program at once
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);
}

int predict(const std::string& text, const std::string& ckpt_path) {
  if (!std::ifstream(ckpt_path))
    throw std::invalid_argument("--predict needs a trained model: no checkpoint " + ckpt_path + " (train first, or pass --checkpoint FILE)");
  const auto ckpt = xgrad::load_checkpoint<float>(ckpt_path);
  Config c;
  c.from_map(ckpt.metadata);
  MaskedCharModel model(c);
  model.load_state_dict(ckpt.model);
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    const IndexArray tokens = encode(word, c.max_len, /*blanks=*/true);
    if (tokens.size() == 0) throw std::invalid_argument("--predict: '" + word + "' must be 1 to " + std::to_string(c.max_len) + " lower-case letters or _ (a blank)");
    const xgrad::BoolArray padding = xt::zeros<bool>({std::size_t(1), tokens.size()});
    const xgrad::Array<float> p = probabilities(model, xt::reshape_view(tokens, {std::size_t(1), tokens.size()}), padding);
    std::printf("%s\n", word.c_str());
    for (std::size_t t = 0; t < word.size(); ++t) {
      if (word[t] != '_') continue;
      std::vector<int> order(26);
      for (int k = 0; k < 26; ++k) order[k] = k;
      const float* row = p.data() + t * kVocab + 2;
      std::partial_sort(order.begin(), order.begin() + 3, order.end(), [&](int a, int b) { return row[a] > row[b]; });
      std::printf("  blank %zu: %c %.3f  %c %.3f  %c %.3f\n", t + 1, 'a' + order[0], row[order[0]], 'a' + order[1],
                  row[order[1]], 'a' + order[2], row[order[2]]);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes, also into a file or pipe
  Config c;
  std::string words_path = "/usr/share/dict/words", ckpt_path = "masked_chars.ckpt", csv_path = "masked_chars.csv";
  std::string resume_path, predict_text;
  int checkpoint_interval = 500, stop_at = 0;
  double min_accuracy = 0;
  CLI::App app{"Trains a BERT-style masked-character model on an English word list."};
  app.add_option("--words", words_path, "one word per line (apt-get install wamerican for the default)")->capture_default_str();
  c.visit([&](const char* k, auto& v, const char* help) { app.add_option(std::string("--") + k, v, help)->capture_default_str(); });
  app.add_option("--checkpoint", ckpt_path, "checkpoint file (also what --predict reads)")->capture_default_str();
  app.add_option("--checkpoint-interval", checkpoint_interval, "steps between checkpoints")->capture_default_str();
  app.add_option("--csv", csv_path, "metrics file (step,loss,accuracy,lr,elapsed)")->capture_default_str();
  app.add_option("--resume", resume_path, "continue the run saved in this checkpoint")->check(CLI::ExistingFile);
  app.add_option("--stop-at", stop_at, "stop at this step with a checkpoint, as Ctrl-C does");
  app.add_option("--min-accuracy", min_accuracy, "exit 1 if the final held-out accuracy is lower");
  app.add_option("--predict", predict_text, "fill the blanks of words like \"h_llo w_rld\" with the checkpoint's model");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!predict_text.empty()) return predict(predict_text, ckpt_path);
    if (!std::ifstream(words_path))
      throw std::invalid_argument("cannot read the word list " + words_path + ": install Debian's wamerican "
                                  "(apt-get install wamerican) or pass --words FILE (one word per line)");
    std::optional<xgrad::Checkpoint<float>> resumed;
    if (!resume_path.empty()) {  // the run's configuration comes from the checkpoint; only --steps may grow
      resumed = xgrad::load_checkpoint<float>(resume_path);
      Config given = c;
      c.from_map(resumed->metadata);
      for (const auto& [key, value] : given.to_map())
        if (key != "config.steps" && app.count("--" + key.substr(7)) && c.to_map().at(key) != value)
          throw std::invalid_argument("--" + key.substr(7) + " differs from the checkpoint's; only --steps may change");
      if (app.count("--steps")) {
        if (given.steps < resumed->step) throw std::invalid_argument("--steps " + std::to_string(given.steps) + " is below the checkpoint's step " + std::to_string(resumed->step));
        c.steps = given.steps;
      }
    }
    if (c.d_model % c.heads != 0) throw std::invalid_argument("--heads must divide --d-model");
    xgrad::set_num_threads(std::max(1, c.threads));
    // Words: lower-case ASCII of at most max_len letters; split by the hash of the word.
    const data::TextLineDataset lines(words_path);
    auto train_set = std::make_shared<Words>();
    Words held_out_words;
    std::vector<std::size_t> letter_counts(kVocab);
    std::size_t skipped = 0;
    for (const std::string& line : lines.lines()) {
      IndexArray t = encode(line, c.max_len);
      if (t.size() == 0) { ++skipped; continue; }
      if (is_held_out(line, c.seed)) { held_out_words.words.push_back(t); continue; }
      for (std::int64_t x : t) ++letter_counts[x];
      train_set->words.push_back(std::move(t));
    }
    if (train_set->words.size() < std::size_t(c.batch_size) || held_out_words.words.empty())
      throw std::invalid_argument(words_path + ": too few usable words (" + std::to_string(train_set->words.size()) + " for training, " + std::to_string(held_out_words.words.size()) + " held out); use a longer list or a smaller --batch-size");
    const std::int64_t common = std::max_element(letter_counts.begin(), letter_counts.end()) - letter_counts.begin();
    std::vector<Masked> held_out;  // masked once, by their own generator
    xgrad::Generator eval_gen(c.seed ^ 0xE7A1D5EEDULL);
    std::size_t baseline_right = 0, chosen = 0;
    for (std::size_t i = 0; i < held_out_words.size(); i += 512) {
      std::vector<IndexArray> part(held_out_words.words.begin() + i, held_out_words.words.begin() + std::min(held_out_words.size(), i + 512));
      held_out.push_back(mask_batch(data::pad_collate<std::int64_t>(part, kPad), c.mask_prob, eval_gen, true));
      for (std::int64_t y : held_out.back().targets) { baseline_right += y == common; chosen += y != kIgnore; }
    }
    std::printf("words: %zu training, %zu held out, %zu lines skipped (not lower-case a-z or longer than %d)\n",
                train_set->size(), held_out_words.size(), skipped, c.max_len);

    xgrad::manual_seed(c.seed);
    MaskedCharModel model(c);
    const auto params = model.parameters();
    xgrad::optim::AdamW<float> optimizer(params, xgrad::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
    const int warmup = std::min(c.warmup, c.steps - 1);
    std::vector<std::shared_ptr<xgrad::optim::LRScheduler<float>>> phases;
    if (warmup > 0) phases.push_back(std::make_shared<xgrad::optim::LinearLR<float>>(optimizer, 0.01, 1.0, warmup));
    phases.push_back(std::make_shared<xgrad::optim::CosineAnnealingLR<float>>(optimizer, std::max(1, c.steps - warmup)));
    xgrad::optim::SequentialLR<float> schedule(optimizer, phases, warmup > 0 ? std::vector<int>{warmup} : std::vector<int>{});
    auto loader = data::make_data_loader(train_set, data::DataLoaderOptions().batch_size(c.batch_size).shuffle(true)
        .drop_last(true).num_workers(c.workers).generator(xgrad::Generator(c.seed + 1)),
        [](const std::vector<IndexArray>& w) { return data::pad_collate<std::int64_t>(w, kPad); });
    std::int64_t step = 0;
    double elapsed_before = 0, loss_sum = 0;
    if (resumed) {
      resumed->restore(model, optimizer, &schedule, xgrad::default_generator());
      loader.load_state_dict(data::DataLoaderState::from_string(resumed->metadata.at("data_loader")));
      step = resumed->step;
      loss_sum = std::strtod(resumed->metadata.at("loss_sum").c_str(), nullptr);
      elapsed_before = std::strtod(resumed->metadata.at("elapsed").c_str(), nullptr);
      std::printf("resumed from %s at step %lld of %d\n", resume_path.c_str(), (long long)step, c.steps);
    }
    std::printf("model: d_model %d, %d layers, %d heads, ff %d; %d steps of %d words, AdamW lr %g, %d workers\n",
                c.d_model, c.layers, c.heads, c.dim_feedforward, c.steps, c.batch_size, c.lr, c.workers);
    std::vector<std::string> rows{"step,loss,accuracy,lr,elapsed"};  // a resumed run keeps the rows up to its step
    std::ifstream old_csv(step > 0 ? csv_path : "");
    for (std::string row; std::getline(old_csv, row);)
      if (!row.empty() && std::isdigit(static_cast<unsigned char>(row[0])) && std::stoll(row) <= step) rows.push_back(row);
    std::ofstream csv(csv_path);
    for (const auto& row : rows) csv << row << '\n';
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] { return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    const auto save = [&](const char* why) {
      auto m = c.to_map();
      m["data_loader"] = loader.state_dict().to_string();
      m["loss_sum"] = Config::exact(loss_sum);
      m["elapsed"] = Config::exact(elapsed());
      xgrad::save_checkpoint(ckpt_path, model, optimizer, &schedule, xgrad::default_generator(), step, m);
      std::printf("checkpoint %s (step %lld, %s)\n", ckpt_path.c_str(), (long long)step, why);
    };
    std::signal(SIGINT, on_sigint);
    const std::int64_t first_step = step;
    while (step < c.steps) {
      auto batch = loader.next();
      if (!batch) batch = loader.next();  // the next epoch
      const Masked m = mask_batch(*batch, c.mask_prob, xgrad::default_generator(), false);
      const Tensor<float> logits = model.forward(m.inputs, m.padding);
      const Tensor<float> loss = xgrad::cross_entropy(xgrad::reshape(logits, {-1, kVocab}),
                                                      IndexArray(xt::reshape_view(m.targets, {m.targets.size()})), kIgnore);
      optimizer.zero_grad();
      loss.backward();
      xgrad::optim::clip_grad_norm_(params, c.clip);
      const double lr = optimizer.param_groups()[0].options().get_lr();
      optimizer.step();
      schedule.step();
      loss_sum += loss.item();
      ++step;
      if (step % c.eval_interval == 0 || step == c.steps) {
        const double acc = accuracy(model, held_out), t = elapsed(), rate = (step - first_step) / (t - elapsed_before);
        const double mean_loss = loss_sum / double((step - 1) % c.eval_interval + 1);
        std::printf("step %lld/%d | loss %.4f | held-out masked-letter accuracy %.2f%% | %.1f steps/s | %.0f s left\n",
                    (long long)step, c.steps, mean_loss, 100 * acc, rate, (c.steps - step) / rate);
        csv << step << ',' << mean_loss << ',' << acc << ',' << lr << ',' << t << std::endl;
        loss_sum = 0;
      }
      if (g_interrupted || step == stop_at) {
        save(g_interrupted ? "interrupted" : "--stop-at");
        std::printf("stopped at step %lld; continue with --resume %s\n", (long long)step, ckpt_path.c_str());
        return g_interrupted ? 130 : 0;
      }
      if (checkpoint_interval > 0 && step % checkpoint_interval == 0 && step < c.steps) save("periodic");
    }
    save("final");
    const double acc = accuracy(model, held_out), baseline = double(baseline_right) / double(chosen);
    std::printf("held-out masked-letter accuracy: %.2f%% over %zu masked letters of %zu words never trained on\n"
                "baseline (always '%c', the most frequent training letter): %.2f%%  -> %.1fx the baseline\n"
                "wall time: %.1f s (%.1f s in this run)\n",
                100 * acc, chosen, held_out_words.size(), char('a' + common - 2), 100 * baseline, acc / baseline,
                elapsed(), elapsed() - elapsed_before);
    return acc < min_accuracy ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_masked_chars: %s\n", e.what());
    return 1;
  }
}
