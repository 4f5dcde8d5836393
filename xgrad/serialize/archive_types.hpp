// Internal to serialize/*.cpp: how each archived type is laid out (archive_io.hpp has the
// machinery). Every type carries a cereal class version (CEREAL_CLASS_VERSION, at the bottom);
// each load checks it, every count against the bytes left (through archive_io's sequences), and
// the values a valid state has. A change of layout bumps the type's version, and its load keeps
// reading the older versions.
#pragma once

#include <algorithm>

#include <variant>

#include <xgrad/optim/optimizer.hpp>
#include <xgrad/serialize/archive_io.hpp>

namespace xgrad::archive_io {

// Class versions of the archived types (what this build writes and the newest it reads).
constexpr std::uint32_t kTensorVersion = 1;
constexpr std::uint32_t kStateDictVersion = 1;
constexpr std::uint32_t kParamStateVersion = 2;     // 1: step and four optional arrays; 2: named arrays
constexpr std::uint32_t kOptionsVersion = 1;        // version 1's options objects (read only)
constexpr std::uint32_t kOptimizerStateVersion = 2;  // 1: SGD, Adam, AdamW fields; 2: named options
constexpr std::uint32_t kLRSchedulerStateVersion = 1;
constexpr std::uint32_t kGeneratorStateVersion = 1;
constexpr std::uint32_t kCheckpointVersion = 1;

template <class T>
constexpr const char* dtype_name() {
  return std::is_same_v<T, float> ? "float32" : "float64";
}

inline const char* non_finite_name(double x) { return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

// {dtype, shape, data} (+ non_finite in JSON); binary data is the raw little-endian elements.
template <class A, class T>
void save_tensor(A& ar, const Array<T>& a) {
  field(ar, "dtype", std::string(dtype_name<T>()));
  save_seq(ar, "shape", a.dimension(), [&](std::size_t i) { ar(static_cast<std::uint64_t>(a.shape()[i])); });
  const T* p = a.data();
  if constexpr (is_json<A>) {
    std::vector<std::pair<std::uint64_t, const char*>> non_finite;
    save_seq(ar, "data", a.size(), [&](std::size_t i) {
      double x = p[i];
      if (!std::isfinite(x)) {
        non_finite.emplace_back(i, non_finite_name(x));
        x = 0;
      }
      ar(x);
    });
    save_seq(ar, "non_finite", non_finite.size(), [&](std::size_t k) {
      save_seq(ar, nullptr, 2, [&](std::size_t j) {
        if (j == 0) ar(non_finite[k].first);
        else ar(std::string(non_finite[k].second));
      });
    });
  } else {
    ar(cereal::binary_data(p, a.size() * sizeof(T)));
  }
}

// Reads `count` elements stored as U into `out` (T): straight in, or through a small buffer.
template <class U, class T>
void read_elements(BinaryIn& ar, T* out, std::uint64_t count) {
  if constexpr (std::is_same_v<U, T>) {
    ar(cereal::binary_data(out, static_cast<std::size_t>(count) * sizeof(T)));
  } else {
    std::vector<U> chunk(static_cast<std::size_t>(std::min<std::uint64_t>(count, 4096)));
    for (std::uint64_t done = 0; done < count;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(count - done, chunk.size()));
      ar(cereal::binary_data(chunk.data(), n * sizeof(U)));
      for (std::size_t i = 0; i < n; ++i) out[done + i] = narrow<T>(static_cast<double>(chunk[i]));
      done += n;
    }
  }
}

template <class A, class T>
void load_tensor(A& ar, Array<T>& out) {
  std::string dtype;
  field(ar, "dtype", dtype);
  if (dtype != "float32" && dtype != "float64")
    throw FormatError("unknown tensor dtype '" + dtype + "' (expected float32 or float64)");
  Shape shape;
  load_seq(ar, "shape", sizeof(std::uint64_t), "a tensor shape", [&](std::size_t i, std::size_t rank) {
    if (i == 0 && rank > kMaxRank)
      throw FormatError("a tensor of " + std::to_string(rank) + " dimensions (at most " + std::to_string(kMaxRank) + ")");
    std::uint64_t d = 0;
    ar(d);
    shape.push_back(static_cast<std::size_t>(d));
  });
  const std::uint64_t count = checked_numel(shape);
  Array<T> a;
  if constexpr (is_json<A>) {
    const std::uint64_t n = begin_seq(ar, "data", 1, "tensor data");
    if (n != count)
      throw FormatError("a tensor of shape " + shape_str(shape) + " holds " + std::to_string(n) + " values; expected " +
                        std::to_string(count));
    a = empty_array<T>(shape, "loading a tensor");
    for (std::uint64_t i = 0; i < n; ++i) {
      double x = 0;
      ar(x);
      a.data()[i] = narrow<T>(x);
    }
    end_seq(ar);
    load_seq(ar, "non_finite", 1, "non-finite values", [&](std::size_t, std::size_t) {
      std::uint64_t index = 0;
      load_fixed_seq(ar, nullptr, 2, "a non-finite value [index, \"nan\" | \"inf\" | \"-inf\"]", [&](std::size_t j) {
        if (j == 0) {
          ar(index);
          if (index >= count)
            throw FormatError("non-finite value at index " + std::to_string(index) + " of a tensor of " +
                              std::to_string(count) + " values");
          return;
        }
        std::string v;
        ar(v);
        if (v == "nan") a.data()[index] = std::numeric_limits<T>::quiet_NaN();
        else if (v == "inf") a.data()[index] = std::numeric_limits<T>::infinity();
        else if (v == "-inf") a.data()[index] = -std::numeric_limits<T>::infinity();
        else throw FormatError("non-finite value '" + v + "' (expected \"nan\", \"inf\" or \"-inf\")");
      });
    });
  } else {
    const std::uint64_t itemsize = dtype == "float32" ? 4 : 8;
    check_fits(ar, count, itemsize, "tensor data");
    a = empty_array<T>(shape, "loading a tensor");
    if (itemsize == 4) read_elements<float>(ar, a.data(), count);
    else read_elements<double>(ar, a.data(), count);
  }
  out = std::move(a);
}

template <class A, class T>
void save_state_dict(A& ar, const nn::StateDict<T>& state) {
  save_seq(ar, "entries", state.size(), [&](std::size_t i) {
    node(ar, nullptr, [&] {
      save_string(ar, "key", state.items()[i].first);
      field(ar, "tensor", state.items()[i].second);
    });
  });
}

template <class A, class T>
void load_state_dict(A& ar, nn::StateDict<T>& out) {
  nn::StateDict<T> state;
  load_seq(ar, "entries", 2 * sizeof(std::uint64_t), "state dict entries", [&](std::size_t, std::size_t) {
    node(ar, nullptr, [&] {
      std::string key;
      field(ar, "key", key);
      Array<T> value;
      field(ar, "tensor", value);
      if (state.contains(key)) throw FormatError("the key '" + key + "' appears twice");
      state.insert(std::move(key), std::move(value));
    });
  });
  out = std::move(state);
}

// ---- optimizer state ---------------------------------------------------------------------------
//
// Version 2 (this build writes it) holds any optimizer the same way, as torch's state_dict does:
//   options of a group: [{"name", "kind": "number" | "bool" | "tuple", "value"}, ...], in the order
//                       the options class declares them (optim::OptimizerOptions::values())
//   a parameter's state: {"step", "arrays": [{"name", "tensor"}, ...]}, arrays sorted by name
// Version 1 knew SGD, Adam and AdamW only: each one's options as fixed fields, and a parameter's
// state as step and four optional arrays (momentum_buffer, exp_avg, exp_avg_sq, max_exp_avg_sq).
// The *_v1 readers below turn it into the version-2 values.

template <class A>
void save_option(A& ar, const std::string& name, const optim::OptionValue& value) {
  node(ar, nullptr, [&] {
    save_string(ar, "name", name);
    if (const double* x = std::get_if<double>(&value)) {
      if constexpr (is_json<A>) check_json_number(name, *x);
      save_string(ar, "kind", "number");
      field(ar, "value", *x);
    } else if (const bool* b = std::get_if<bool>(&value)) {
      save_string(ar, "kind", "bool");
      field(ar, "value", *b);
    } else {
      const auto& tuple = std::get<std::vector<double>>(value);
      if constexpr (is_json<A>)
        for (double x : tuple) check_json_number(name, x);
      save_string(ar, "kind", "tuple");
      save_doubles(ar, "value", tuple);
    }
  });
}

template <class A>
std::pair<std::string, optim::OptionValue> load_option(A& ar) {
  std::pair<std::string, optim::OptionValue> option;
  node(ar, nullptr, [&] {
    std::string kind;
    field(ar, "name", option.first);
    field(ar, "kind", kind);
    if (kind == "number") {
      double x = 0;
      field(ar, "value", x);
      option.second = x;
    } else if (kind == "bool") {
      option.second = load_bool(ar, "value", option.first.c_str());
    } else if (kind == "tuple") {
      std::vector<double> tuple;
      load_doubles(ar, "value", tuple);
      option.second = std::move(tuple);
    } else {
      throw FormatError("the option '" + option.first + "' is of the unknown kind '" + kind +
                        "' (expected number, bool or tuple)");
    }
  });
  return option;
}

template <class A>
void save_options(A& ar, const optim::OptimizerOptions& options) {
  const optim::OptionValues values = options.values();
  save_seq(ar, "options", values.size(), [&](std::size_t i) { save_option(ar, values[i].first, values[i].second); });
}

template <class A>
optim::OptionValues load_options(A& ar) {
  optim::OptionValues values;
  // each at least a name and a kind (two u64 lengths) and a byte
  load_seq(ar, "options", 2 * sizeof(std::uint64_t) + 1, "options", [&](std::size_t, std::size_t) {
    auto option = load_option(ar);
    for (const auto& [name, value] : values)
      if (name == option.first) throw FormatError("the option '" + name + "' appears twice");
    values.push_back(std::move(option));
  });
  return values;
}

// Version 1's options: the fields of SGDOptions, AdamOptions and AdamWOptions as they were
// written, by optimizer name (kind 'n' a number, 'b' a bool, '2' two numbers).
struct OptionsV1 {
  std::string optimizer;  // set before reading
  optim::OptionValues values;
};

struct FieldV1 {
  const char* name;
  char kind;
};

inline std::vector<FieldV1> option_fields_v1(const std::string& optimizer) {
  if (optimizer == "SGD")
    return {{"lr", 'n'}, {"momentum", 'n'}, {"dampening", 'n'}, {"weight_decay", 'n'}, {"nesterov", 'b'},
            {"maximize", 'b'}};
  if (optimizer == "Adam" || optimizer == "AdamW")
    return {{"lr", 'n'}, {"betas", '2'}, {"eps", 'n'}, {"weight_decay", 'n'}, {"amsgrad", 'b'}, {"maximize", 'b'}};
  throw FormatError("unknown optimizer '" + optimizer + "' (a version-1 optimizer state is of SGD, Adam or AdamW)");
}

template <class A>
void load_options_v1(A& ar, OptionsV1& o) {
  o.values.clear();
  for (const FieldV1& f : option_fields_v1(o.optimizer)) {
    if (f.kind == 'n') {
      double x = 0;
      field(ar, f.name, x);
      o.values.emplace_back(f.name, x);
    } else if (f.kind == 'b') {
      o.values.emplace_back(f.name, load_bool(ar, f.name));
    } else {
      std::vector<double> pair(2);
      load_fixed_seq(ar, f.name, 2, f.name, [&](std::size_t i) { ar(pair[i]); });
      o.values.emplace_back(f.name, std::move(pair));
    }
  }
}

template <class A, class T>
void save_param_state(A& ar, const optim::ParamState<T>& s) {
  field(ar, "step", s.step);
  save_seq(ar, "arrays", s.arrays().size(), [&ar, it = s.arrays().begin()](std::size_t) mutable {
    node(ar, nullptr, [&] {
      save_string(ar, "name", it->first);
      field(ar, "tensor", it->second);
    });
    ++it;
  });
}

template <class A, class T>
void load_param_state(A& ar, optim::ParamState<T>& s, std::uint32_t version) {
  optim::ParamState<T> state;
  field(ar, "step", state.step);
  if (state.step < 0) throw FormatError("a parameter's step count is negative (" + std::to_string(state.step) + ")");
  if (version == 1) {
    for (const char* name : {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"})
      load_optional(ar, name, [&] {
        Array<T> a;
        ar(a);
        state.set(name, std::move(a));
      });
  } else {
    // each at least a name and a tensor's dtype and shape (three u64 lengths)
    load_seq(ar, "arrays", 3 * sizeof(std::uint64_t), "state arrays", [&](std::size_t, std::size_t) {
      node(ar, nullptr, [&] {
        std::string name;
        Array<T> a;
        field(ar, "name", name);
        field(ar, "tensor", a);
        if (state.has(name)) throw FormatError("the state array '" + name + "' appears twice");
        state.set(name, std::move(a));
      });
    });
  }
  s = std::move(state);
}

template <class A, class T>
void save_optimizer_state(A& ar, const OptimizerState<T>& s) {
  save_string(ar, "optimizer", s.optimizer);
  save_seq(ar, "param_groups", s.param_groups.size(), [&](std::size_t i) {
    const auto& group = s.param_groups[i];
    if (!group.options) throw std::invalid_argument("parameter group " + std::to_string(i) + " has no options");
    if (s.optimizer != group.options->optimizer_name())
      throw std::invalid_argument("parameter group " + std::to_string(i) + " of " + s.optimizer + " has " +
                                  group.options->optimizer_name() + " options");
    node(ar, nullptr, [&] {
      save_options(ar, *group.options);
      save_optional(ar, "initial_lr", group.initial_lr, [&](double lr) { save_number(ar, nullptr, lr); });
      save_strings(ar, "params", group.params);
    });
  });
  save_seq(ar, "state", s.state.size(), [&](std::size_t i) {
    node(ar, nullptr, [&] {
      save_string(ar, "param", s.state[i].first);
      field(ar, "state", s.state[i].second);
    });
  });
}

// Checks what a well-formed optimizer state is: parameter names unique, state only for them.
template <class T>
void check_optimizer_state(const OptimizerState<T>& s);

template <class A, class T>
void load_optimizer_state(A& ar, OptimizerState<T>& out, std::uint32_t version) {
  OptimizerState<T> s;
  field(ar, "optimizer", s.optimizer);
  if (s.optimizer.empty()) throw FormatError("the optimizer has no name");
  if (version == 1) option_fields_v1(s.optimizer);  // throws for an optimizer version 1 did not know
  load_seq(ar, "param_groups", 3 * sizeof(std::uint64_t), "parameter groups", [&](std::size_t, std::size_t) {
    node(ar, nullptr, [&] {
      typename OptimizerState<T>::Group group;
      optim::OptionValues values;
      if (version == 1) {
        OptionsV1 v1{s.optimizer, {}};
        field(ar, "options", v1);
        values = std::move(v1.values);
      } else {
        values = load_options(ar);
      }
      auto options = std::make_shared<optim::SavedOptions>(s.optimizer, std::move(values));
      try {
        options->validate();
      } catch (const std::invalid_argument& e) {
        throw FormatError(std::string("invalid options: ") + e.what());
      }
      group.options = std::move(options);
      load_optional(ar, "initial_lr", [&] {
        double lr = 0;
        ar(lr);
        group.initial_lr = lr;
      });
      load_strings(ar, "params", group.params);
      s.param_groups.push_back(std::move(group));
    });
  });
  load_seq(ar, "state", 2 * sizeof(std::uint64_t), "parameter states", [&](std::size_t, std::size_t) {
    node(ar, nullptr, [&] {
      std::pair<std::string, optim::ParamState<T>> entry;
      field(ar, "param", entry.first);
      field(ar, "state", entry.second);
      s.state.push_back(std::move(entry));
    });
  });
  check_optimizer_state(s);
  out = std::move(s);
}

template <class A>
void save_lr_scheduler_state(A& ar, const optim::LRSchedulerState& s) {
  field(ar, "last_epoch", static_cast<std::int64_t>(s.last_epoch));
  field(ar, "step_count", static_cast<std::int64_t>(s.step_count));
  save_doubles(ar, "base_lrs", s.base_lrs);
  save_doubles(ar, "last_lr", s.last_lr);
  save_seq(ar, "schedulers", s.schedulers.size(), [&](std::size_t i) { ar(s.schedulers[i]); });
}

template <class A>
void load_lr_scheduler_state(A& ar, optim::LRSchedulerState& s) {
  NestingGuard guard(nesting_depth(ar), kMaxSchedulerNesting, "learning-rate schedules");
  std::int64_t last_epoch = 0, step_count = 0;
  field(ar, "last_epoch", last_epoch);
  field(ar, "step_count", step_count);
  constexpr std::int64_t int_max = std::numeric_limits<int>::max();
  if (last_epoch < -1 || last_epoch > int_max || step_count < 0 || step_count > int_max)
    throw FormatError("invalid schedule state (last_epoch " + std::to_string(last_epoch) + ", step_count " +
                      std::to_string(step_count) + ")");
  s.last_epoch = static_cast<int>(last_epoch);
  s.step_count = static_cast<int>(step_count);
  load_doubles(ar, "base_lrs", s.base_lrs);
  load_doubles(ar, "last_lr", s.last_lr);
  if (s.base_lrs.size() != s.last_lr.size())
    throw FormatError("a schedule state has " + std::to_string(s.base_lrs.size()) + " base_lrs but " +
                      std::to_string(s.last_lr.size()) + " last_lr");
  s.schedulers.clear();
  load_seq(ar, "schedulers", 4 * sizeof(std::uint64_t), "nested schedules", [&](std::size_t, std::size_t) {
    optim::LRSchedulerState child;
    ar(child);
    s.schedulers.push_back(std::move(child));
  });
}

template <class A>
void save_generator_state(A& ar, const GeneratorState& g) {
  field(ar, "seed", g.seed);
  save_seq(ar, "state", g.s.size(), [&](std::size_t i) { ar(g.s[i]); });
}

template <class A>
void load_generator_state(A& ar, GeneratorState& g) {
  field(ar, "seed", g.seed);
  load_fixed_seq(ar, "state", g.s.size(), "the generator state", [&](std::size_t i) { ar(g.s[i]); });
  if (g.s == std::array<std::uint64_t, 4>{})
    throw FormatError("the generator state is all zeros (xoshiro256** never leaves it)");
}

}  // namespace xgrad::archive_io

// cereal finds these by the archive's namespace.
namespace cereal {

#define XGRAD_ARCHIVED(TYPE, VERSION, WHAT, SAVE, LOAD)                                 \
  template <class A>                                                                    \
  void CEREAL_SAVE_FUNCTION_NAME(A& ar, const TYPE& value, const std::uint32_t) {       \
    xgrad::archive_io::SAVE(ar, value);                                                 \
  }                                                                                     \
  template <class A>                                                                    \
  void CEREAL_LOAD_FUNCTION_NAME(A& ar, TYPE& value, const std::uint32_t version) {     \
    xgrad::archive_io::check_version(version, xgrad::archive_io::VERSION, WHAT);        \
    xgrad::archive_io::LOAD(ar, value);                                                 \
  }

// The same for types whose load reads older class versions: LOAD(ar, value, version).
#define XGRAD_ARCHIVED_VERSIONS(TYPE, VERSION, WHAT, SAVE, LOAD)                        \
  template <class A>                                                                    \
  void CEREAL_SAVE_FUNCTION_NAME(A& ar, const TYPE& value, const std::uint32_t) {       \
    xgrad::archive_io::SAVE(ar, value);                                                 \
  }                                                                                     \
  template <class A>                                                                    \
  void CEREAL_LOAD_FUNCTION_NAME(A& ar, TYPE& value, const std::uint32_t version) {     \
    xgrad::archive_io::check_version(version, xgrad::archive_io::VERSION, WHAT);        \
    xgrad::archive_io::LOAD(ar, value, version);                                        \
  }

XGRAD_ARCHIVED(xgrad::Array<float>, kTensorVersion, "tensor", save_tensor, load_tensor)
XGRAD_ARCHIVED(xgrad::Array<double>, kTensorVersion, "tensor", save_tensor, load_tensor)
XGRAD_ARCHIVED(xgrad::nn::StateDict<float>, kStateDictVersion, "state dict", save_state_dict, load_state_dict)
XGRAD_ARCHIVED(xgrad::nn::StateDict<double>, kStateDictVersion, "state dict", save_state_dict, load_state_dict)
XGRAD_ARCHIVED_VERSIONS(xgrad::optim::ParamState<float>, kParamStateVersion, "parameter state", save_param_state,
                        load_param_state)
XGRAD_ARCHIVED_VERSIONS(xgrad::optim::ParamState<double>, kParamStateVersion, "parameter state",
                        save_param_state, load_param_state)
XGRAD_ARCHIVED_VERSIONS(xgrad::OptimizerState<float>, kOptimizerStateVersion, "optimizer state",
                        save_optimizer_state, load_optimizer_state)
XGRAD_ARCHIVED_VERSIONS(xgrad::OptimizerState<double>, kOptimizerStateVersion, "optimizer state",
                        save_optimizer_state, load_optimizer_state)

// Version 1's options are only read.
template <class A>
void CEREAL_LOAD_FUNCTION_NAME(A& ar, xgrad::archive_io::OptionsV1& value, const std::uint32_t version) {
  xgrad::archive_io::check_version(version, xgrad::archive_io::kOptionsVersion, "options");
  xgrad::archive_io::load_options_v1(ar, value);
}
XGRAD_ARCHIVED(xgrad::optim::LRSchedulerState, kLRSchedulerStateVersion, "schedule state", save_lr_scheduler_state,
               load_lr_scheduler_state)
XGRAD_ARCHIVED(xgrad::GeneratorState, kGeneratorStateVersion, "generator state", save_generator_state,
               load_generator_state)

}  // namespace cereal

CEREAL_CLASS_VERSION(xgrad::Array<float>, xgrad::archive_io::kTensorVersion)
CEREAL_CLASS_VERSION(xgrad::Array<double>, xgrad::archive_io::kTensorVersion)
CEREAL_CLASS_VERSION(xgrad::nn::StateDict<float>, xgrad::archive_io::kStateDictVersion)
CEREAL_CLASS_VERSION(xgrad::nn::StateDict<double>, xgrad::archive_io::kStateDictVersion)
CEREAL_CLASS_VERSION(xgrad::optim::ParamState<float>, xgrad::archive_io::kParamStateVersion)
CEREAL_CLASS_VERSION(xgrad::optim::ParamState<double>, xgrad::archive_io::kParamStateVersion)
CEREAL_CLASS_VERSION(xgrad::archive_io::OptionsV1, xgrad::archive_io::kOptionsVersion)
CEREAL_CLASS_VERSION(xgrad::OptimizerState<float>, xgrad::archive_io::kOptimizerStateVersion)
CEREAL_CLASS_VERSION(xgrad::OptimizerState<double>, xgrad::archive_io::kOptimizerStateVersion)
CEREAL_CLASS_VERSION(xgrad::optim::LRSchedulerState, xgrad::archive_io::kLRSchedulerStateVersion)
CEREAL_CLASS_VERSION(xgrad::GeneratorState, xgrad::archive_io::kGeneratorStateVersion)
