// Checkpoints (checkpoint.hpp): capture and restore, and their archive.
#include <xgrad/serialize/checkpoint.hpp>

#include <sstream>
#include <stdexcept>

#include <xgrad/serialize/archive_types.hpp>
#include <xgrad/serialize/atomic_file.hpp>

namespace xgrad {

namespace archive_io {

constexpr const char* kCheckpointKind = "checkpoint";

template <class A, class T>
void save_checkpoint_fields(A& ar, const Checkpoint<T>& c) {
  field(ar, "model", c.model);
  field(ar, "optimizer", c.optimizer);
  save_optional(ar, "scheduler", c.scheduler, [&](const optim::LRSchedulerState& s) { ar(s); });
  field(ar, "generator", c.generator);
  field(ar, "step", c.step);
  save_seq(ar, "metadata", c.metadata.size(), [it = c.metadata.begin(), &ar](std::size_t) mutable {
    node(ar, nullptr, [&] {
      save_string(ar, "key", it->first);
      save_string(ar, "value", it->second);
    });
    ++it;
  });
}

template <class A, class T>
void load_checkpoint_fields(A& ar, Checkpoint<T>& out) {
  Checkpoint<T> c;
  field(ar, "model", c.model);
  field(ar, "optimizer", c.optimizer);
  load_optional(ar, "scheduler", [&] {
    optim::LRSchedulerState s;
    ar(s);
    c.scheduler = std::move(s);
  });
  field(ar, "generator", c.generator);
  field(ar, "step", c.step);
  load_seq(ar, "metadata", 2 * sizeof(std::uint64_t), "metadata entries", [&](std::size_t, std::size_t) {
    node(ar, nullptr, [&] {
      std::string key, value;
      field(ar, "key", key);
      field(ar, "value", value);
      if (!c.metadata.emplace(std::move(key), std::move(value)).second)
        throw FormatError("a metadata key appears twice");
    });
  });
  // Every parameter the optimizer names is in the model.
  for (const auto& group : c.optimizer.param_groups)
    for (const auto& name : group.params)
      if (!c.model.contains(name))
        throw FormatError("the optimizer holds the parameter '" + name + "', which the model does not have");
  out = std::move(c);
}

}  // namespace archive_io
}  // namespace xgrad

namespace cereal {

template <class A, class T>
void CEREAL_SAVE_FUNCTION_NAME(A& ar, const xgrad::Checkpoint<T>& c, const std::uint32_t) {
  xgrad::archive_io::save_checkpoint_fields(ar, c);
}
template <class A, class T>
void CEREAL_LOAD_FUNCTION_NAME(A& ar, xgrad::Checkpoint<T>& c, const std::uint32_t version) {
  xgrad::archive_io::check_version(version, xgrad::archive_io::kCheckpointVersion, "checkpoint");
  xgrad::archive_io::load_checkpoint_fields(ar, c);
}

}  // namespace cereal

CEREAL_CLASS_VERSION(xgrad::Checkpoint<float>, xgrad::archive_io::kCheckpointVersion)
CEREAL_CLASS_VERSION(xgrad::Checkpoint<double>, xgrad::archive_io::kCheckpointVersion)

namespace xgrad {

template <class T>
Checkpoint<T> Checkpoint<T>::capture(const nn::Module<T>& model, const optim::Optimizer<T>& optimizer,
                                     const optim::LRScheduler<T>* scheduler, const Generator& generator,
                                     std::int64_t step, std::map<std::string, std::string> metadata) {
  Checkpoint c;
  c.model = model.state_dict();
  c.optimizer = optimizer_state_dict(optimizer, parameter_names(optimizer, model));
  if (scheduler != nullptr) c.scheduler = scheduler->state();
  c.generator = generator.get_state();
  c.step = step;
  c.metadata = std::move(metadata);
  return c;
}

template <class T>
void Checkpoint<T>::restore(nn::Module<T>& model, optim::Optimizer<T>& optimizer, optim::LRScheduler<T>* scheduler,
                            Generator& generator) const {
  XGRAD_CHECK(scheduler != nullptr || !this->scheduler, "Checkpoint::restore: the checkpoint holds a ",
              "learning-rate schedule's state; pass the schedule to restore it");
  XGRAD_CHECK(scheduler == nullptr || this->scheduler, "Checkpoint::restore: a schedule was given but the ",
              "checkpoint holds no schedule state");
  const std::vector<std::string> names = parameter_names(optimizer, model);
  // Each load below checks everything before changing anything; when a later one fails, the
  // earlier ones are put back.
  const nn::StateDict<T> model_before = model.state_dict();
  const OptimizerState<T> optimizer_before = optimizer_state_dict(optimizer, names);
  const optim::LRSchedulerState scheduler_before = scheduler ? scheduler->state() : optim::LRSchedulerState{};
  model.load_state_dict(this->model);
  try {
    load_optimizer_state_dict(optimizer, this->optimizer, names);
    if (scheduler != nullptr) scheduler->load_state(*this->scheduler);
  } catch (...) {
    model.load_state_dict(model_before);
    load_optimizer_state_dict(optimizer, optimizer_before, names);
    if (scheduler != nullptr) scheduler->load_state(scheduler_before);
    throw;
  }
  generator.set_state(this->generator);
}

template <class T>
void write_checkpoint(std::ostream& out, const Checkpoint<T>& checkpoint, ArchiveFormat format) {
  archive_io::write_archive(out, format, archive_io::kCheckpointKind,
                            [&](auto& ar) { archive_io::field(ar, archive_io::kCheckpointKind, checkpoint); });
}

template <class T>
std::string checkpoint_bytes(const Checkpoint<T>& checkpoint, ArchiveFormat format) {
  std::ostringstream out(std::ios::binary);
  write_checkpoint(out, checkpoint, format);
  return std::move(out).str();
}

template <class T>
void save_checkpoint(const Checkpoint<T>& checkpoint, const std::string& path) {
  write_file_atomically(path, [&](std::ostream& out) { write_checkpoint(out, checkpoint, archive_format(path)); });
}

template <class T>
void save_checkpoint(const std::string& path, const nn::Module<T>& model, const optim::Optimizer<T>& optimizer,
                     const optim::LRScheduler<typename detail::NoDeduce<T>::type>* scheduler,
                     const Generator& generator, std::int64_t step, std::map<std::string, std::string> metadata) {
  save_checkpoint(Checkpoint<T>::capture(model, optimizer, scheduler, generator, step, std::move(metadata)), path);
}

namespace {

template <class T>
Checkpoint<T> parse_checkpoint(const char* who, const std::string& name, const char* data, std::size_t size,
                               ArchiveFormat format) {
  Checkpoint<T> c;
  archive_io::read_archive(who, name, data, size, format, archive_io::kCheckpointKind,
                           [&](auto& ar) { archive_io::field(ar, archive_io::kCheckpointKind, c); });
  return c;
}

}  // namespace

template <class T>
Checkpoint<T> load_checkpoint(const std::string& path) {
  const std::string bytes = archive_io::read_file("load_checkpoint", path);
  return parse_checkpoint<T>("load_checkpoint", path, bytes.data(), bytes.size(), archive_format(path));
}

template <class T>
Checkpoint<T> load_checkpoint(const std::string& path, nn::Module<T>& model, optim::Optimizer<T>& optimizer,
                              optim::LRScheduler<typename detail::NoDeduce<T>::type>* scheduler,
                              Generator& generator) {
  Checkpoint<T> c = load_checkpoint<T>(path);
  try {
    c.restore(model, optimizer, scheduler, generator);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("load_checkpoint: '" + path + "': " + e.what());
  }
  return c;
}

template <class T>
Checkpoint<T> load_checkpoint_from_memory(const void* data, std::size_t size, ArchiveFormat format,
                                          const std::string& name) {
  return parse_checkpoint<T>("load_checkpoint", name, static_cast<const char*>(data), size, format);
}

namespace {
constexpr const char* kRankGeneratorsHeader = "RankGenerators v1";

std::uint64_t parse_word(const std::string& text, const std::string& all) {
  std::uint64_t v = 0;
  XGRAD_CHECK(integer_from_text(text, v) == NumberStatus::ok && text[0] != '-',
              "rank_generators_from_string: expected an unsigned 64-bit integer, got '", text, "' in '", all, "'");
  return v;
}
}  // namespace

std::string rank_generators_to_string(const std::vector<GeneratorState>& states) {
  std::ostringstream s;
  s << kRankGeneratorsHeader << " n=" << states.size();
  for (std::size_t r = 0; r < states.size(); ++r) {
    s << ' ' << r << '=' << states[r].seed;
    for (std::uint64_t w : states[r].s) s << ',' << w;
  }
  return s.str();
}

std::vector<GeneratorState> rank_generators_from_string(const std::string& text) {
  const std::string header = kRankGeneratorsHeader;
  XGRAD_CHECK(text.compare(0, header.size(), header) == 0, "rank_generators_from_string: expected text starting ",
              "with '", header, "', got '", text, "'");
  std::istringstream in(text.substr(header.size()));
  std::string item;
  XGRAD_CHECK(static_cast<bool>(in >> item) && item.compare(0, 2, "n=") == 0,
              "rank_generators_from_string: expected 'n=<ranks>' after the header, got '", text, "'");
  const std::uint64_t n = parse_word(item.substr(2), text);
  XGRAD_CHECK(n > 0 && n <= (1u << 20), "rank_generators_from_string: n must be in [1, 2^20], got ", n);
  std::vector<GeneratorState> states(n);
  std::vector<bool> seen(n, false);
  std::size_t count = 0;
  while (in >> item) {
    const auto eq = item.find('=');
    XGRAD_CHECK(eq != std::string::npos, "rank_generators_from_string: expected <rank>=<state>, got '", item, "'");
    const std::uint64_t r = parse_word(item.substr(0, eq), text);
    XGRAD_CHECK(r < n && !seen[r], "rank_generators_from_string: rank ", r, " is ",
                r < n ? "given twice" : "out of range", " in '", text, "'");
    std::vector<std::uint64_t> words;
    std::istringstream w(item.substr(eq + 1));
    std::string part;
    while (std::getline(w, part, ',')) words.push_back(parse_word(part, text));
    XGRAD_CHECK(words.size() == 5, "rank_generators_from_string: rank ", r, "'s state must be 5 comma-separated ",
                "integers (seed and state), got '", item, "'");
    GeneratorState& g = states[r];
    g.seed = words[0];
    for (int i = 0; i < 4; ++i) g.s[i] = words[i + 1];
    const bool all_zero = g.s[0] == 0 && g.s[1] == 0 && g.s[2] == 0 && g.s[3] == 0;
    XGRAD_CHECK(!all_zero, "rank_generators_from_string: rank ", r,
                "'s state is all zeros (xoshiro256** never reaches it)");
    seen[r] = true;
    ++count;
  }
  XGRAD_CHECK(count == n, "rank_generators_from_string: ", count, " states for n=", n, " ranks in '", text, "'");
  return states;
}

#define XGRAD_INSTANTIATE(T)                                                                                     \
  template struct Checkpoint<T>;                                                                                 \
  template void write_checkpoint<T>(std::ostream&, const Checkpoint<T>&, ArchiveFormat);                        \
  template std::string checkpoint_bytes<T>(const Checkpoint<T>&, ArchiveFormat);                                 \
  template void save_checkpoint<T>(const Checkpoint<T>&, const std::string&);                                   \
  template void save_checkpoint<T>(const std::string&, const nn::Module<T>&, const optim::Optimizer<T>&,        \
                                   const optim::LRScheduler<T>*, const Generator&, std::int64_t,                \
                                   std::map<std::string, std::string>);                                         \
  template Checkpoint<T> load_checkpoint<T>(const std::string&);                                                \
  template Checkpoint<T> load_checkpoint<T>(const std::string&, nn::Module<T>&, optim::Optimizer<T>&,           \
                                            optim::LRScheduler<T>*, Generator&);                                \
  template Checkpoint<T> load_checkpoint_from_memory<T>(const void*, std::size_t, ArchiveFormat, const std::string&);

XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
