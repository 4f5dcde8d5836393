// The registry of gradient checks: the list of registering files and the shared builders (see
// gradcheck_registry.hpp).
#include <xgrad/core/gradcheck_registry.hpp>

#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>

#include <xgrad/core/factories.hpp>
#include <xgrad/base/random.hpp>

// Every file with an XGRAD_GRADCHECKS block, in the order gradcheck_entries() lists their
// entries: the ops in the order of ops/ops.hpp, then the modules. Calling each registration
// function is what links the file into a program that asks for the entries (a static library
// drops an object nothing references). A new file with checks adds its line here.
#define XGRAD_GRADCHECK_FILES(X) \
  X(ops_elementwise)             \
  X(ops_reduction)               \
  X(ops_shape)                   \
  X(ops_indexing)                \
  X(ops_matmul)                  \
  X(ops_softmax)                 \
  X(ops_layer_norm)              \
  X(ops_dropout)                 \
  X(ops_attention)               \
  X(ops_loss)                    \
  X(nn_linear)                   \
  X(nn_layer_norm)               \
  X(nn_activation)               \
  X(nn_dropout)                  \
  X(nn_embedding)                \
  X(nn_multihead_attention)      \
  X(nn_transformer)              \
  X(nn_sequential)

namespace xgrad {

namespace detail {
#define XGRAD_DECLARE_GRADCHECKS(name) void register_gradchecks_##name(GradcheckGroup& checks);
XGRAD_GRADCHECK_FILES(XGRAD_DECLARE_GRADCHECKS)
#undef XGRAD_DECLARE_GRADCHECKS
}  // namespace detail

namespace {

void check_new_entry(const GradcheckEntry& entry, std::set<std::string>& names, const char* who) {
  if (entry.name.empty()) throw std::invalid_argument(std::string(who) + ": a gradcheck entry needs a name");
  if (!entry.run)
    throw std::invalid_argument(std::string(who) + ": the gradcheck entry \"" + entry.name + "\" has no function");
  if (!names.insert(entry.name).second)
    throw std::invalid_argument(std::string(who) + ": two gradcheck entries are named \"" + entry.name + "\"" +
                                (entry.group.empty() ? "" : " (the second in " + entry.group + ")"));
}

struct Registry {
  std::mutex mutex;
  std::vector<GradcheckEntry> entries;
  std::set<std::string> names;

  Registry() {
    std::vector<GradcheckGroup> groups;
#define XGRAD_RUN_GRADCHECKS(name)              \
  {                                             \
    GradcheckGroup group(#name);                \
    detail::register_gradchecks_##name(group);  \
    groups.push_back(std::move(group));         \
  }
    XGRAD_GRADCHECK_FILES(XGRAD_RUN_GRADCHECKS)
#undef XGRAD_RUN_GRADCHECKS
    for (auto& g : groups) {
      if (g.entries().empty())
        throw std::logic_error("gradcheck registry: the file " + g.group() + " registers no checks");
      for (auto& entry : g.entries()) {
        check_new_entry(entry, names, "gradcheck registry");
        entries.push_back(std::move(entry));
      }
    }
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::vector<GradcheckEntry> gradcheck_entries() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.entries;
}

void register_gradcheck(GradcheckEntry entry) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  entry.group.clear();
  check_new_entry(entry, r.names, "register_gradcheck");
  r.entries.push_back(std::move(entry));
}

namespace gradcheck_support {

T64 Maker::operator()(const Shape& shape, Values values) {
  Generator gen(seed_ * 1000 + count_++);
  T64 t = values == Values::positive ? rand<double>(shape, gen) : randn<double>(shape, gen);
  for (auto& v : t.mutable_value()) {
    if (values == Values::positive) v += 0.5;                        // [0.5, 1.5)
    if (values == Values::away_from_zero) v += v >= 0 ? 0.1 : -0.1;  // no kink within 0.1
  }
  return t.requires_grad_(true);
}

IndexArray Maker::indices(const Shape& shape, std::size_t high) {
  Generator gen(seed_ * 1000 + count_++);
  IndexArray a = IndexArray::from_shape(shape);
  for (auto& v : a) v = static_cast<std::int64_t>(gen.next_u64() % high);
  return a;
}

BoolArray Maker::mask(const Shape& shape, double p_true) {
  Generator gen(seed_ * 1000 + count_++);
  BoolArray a = BoolArray::from_shape(shape);
  for (auto& v : a) v = gen.uniform() < p_true;
  return a;
}

std::string shapes_of(const Inputs& inputs) {
  std::string s;
  for (const auto& t : inputs) s += (s.empty() ? "" : " ") + shape_str(t.shape());
  return s;
}

GradcheckOutcome op_check(const GradcheckFunction& f, const Inputs& inputs, const GradcheckOptions& options,
                          const std::string& note) {
  return {shapes_of(inputs) + (note.empty() ? "" : " " + note), gradcheck(f, inputs, options)};
}

GradcheckOutcome parameters_check(const NamedTensors& parameters, const T64& x, const std::function<T64()>& evaluate,
                                  const GradcheckOptions& options, const std::string& input_note) {
  NamedTensors tensors;
  if (x.defined()) tensors.emplace_back("input", x);
  std::size_t n = 0;
  for (const auto& p : parameters) {
    tensors.push_back(p);
    n += p.second.numel();
  }
  const std::string input = x.defined() ? shape_str(x.shape()) : input_note;
  const std::size_t count = tensors.size() - (x.defined() ? 1 : 0);
  return {count == 0 ? input : input + " + " + std::to_string(count) + " params (" + std::to_string(n) + " values)",
          gradcheck_parameters(evaluate, tensors, options)};
}

std::function<T64()> reseeded(std::uint64_t seed, std::function<T64()> evaluate) {
  return [=] {
    manual_seed(seed + 7);
    return evaluate();
  };
}

GradcheckEntry unary(const std::string& name, const std::string& call, T64 (*op)(const T64&), Values values) {
  return {name, call + ", x (B, L, D)", [=](const GradcheckSizes& s, const GradcheckOptions& o) {
            Maker make(s.seed);
            return op_check([=](const Inputs& in) { return op(in[0]); }, {make({s.B, s.L, s.D}, values)}, o);
          }};
}

GradcheckEntry binary(const std::string& name, T64 (*op)(const T64&, const T64&), Values rhs) {
  return {name, name + "(a, b), a (B, L, D), b (L, 1) broadcast",
          [=](const GradcheckSizes& s, const GradcheckOptions& o) {
            Maker make(s.seed);
            return op_check([=](const Inputs& in) { return op(in[0], in[1]); },
                            {make({s.B, s.L, s.D}), make({s.L, 1}, rhs)}, o);
          }};
}

}  // namespace gradcheck_support
}  // namespace xgrad
