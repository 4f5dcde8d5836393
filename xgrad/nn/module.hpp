// nn::Module<T>: the base of every layer. A module owns named parameters, buffers and
// submodules, registered in order; walking them joins names with dots, so the keys equal those
// of PyTorch's `state_dict()` for the same model (`layers.0.self_attn.in_proj_weight`).
//
// compile: snippet
//   class Net : public nn::Module<float> {
//    public:
//     Net() : Module("Net") {
//       fc = register_module("fc", std::make_shared<nn::Linear<float>>(4, 8));
//       scale = register_parameter("scale", ones<float>({8}));
//     }
//     Tensor<float> forward(const Tensor<float>& x) override { return fc->forward(x) * scale; }
//     std::shared_ptr<nn::Linear<float>> fc;
//     Tensor<float> scale;
//   };
//
// Modules are held by std::shared_ptr. A parameter handle kept in a member aliases the
// registered one (Tensor copies alias), and load_state_dict writes values in place, so the
// member, the registry and any optimizer holding the parameter stay the same tensor.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <xgrad/ops/ops.hpp>

namespace xgrad::nn {

// An ordered name -> array map: the values of a module's parameters and buffers, in PyTorch's
// state_dict key order. Keys are unique.
template <class T = float>
class StateDict {
 public:
  using Item = std::pair<std::string, Array<T>>;

  // Appends; throws if the key is already present.
  void insert(std::string key, Array<T> value);
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  // Throws naming the key when absent.
  const Array<T>& at(const std::string& key) const;
  Array<T>& at(const std::string& key);
  // nullptr when absent.
  const Array<T>* find(const std::string& key) const;

  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  const std::vector<Item>& items() const { return items_; }
  typename std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  typename std::vector<Item>::const_iterator end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, std::size_t> index_;
};

// What load_state_dict(state, strict=false) skipped (PyTorch's `_IncompatibleKeys`).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, not in the state
  std::vector<std::string> unexpected_keys;  // in the state, not in the module
};

template <class T = float>
class Module : public std::enable_shared_from_this<Module<T>> {
 public:
  template <class V>
  using Named = std::vector<std::pair<std::string, V>>;

  // `name` is the class name, as PyTorch prints it ("Linear").
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  // Copying a module would alias its parameters; build a new one and load_state_dict instead.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }

  // The single-input forward that Sequential calls; modules with another signature
  // (MultiheadAttention, Embedding) leave it throwing "<Name> has no single-input forward".
  virtual Tensor<T> forward(const Tensor<T>& input);

  // ---- registration --------------------------------------------------------------------------
  // Names must be non-empty, contain no '.', and be unused by any parameter, buffer or submodule
  // of this module. A parameter is a leaf; it is made to require grad (nn.Parameter) unless
  // requires_grad is false. Returns the registered handle (it aliases `tensor`).
  Tensor<T> register_parameter(const std::string& name, Tensor<T> tensor, bool requires_grad = true);
  // A buffer is state that is saved but not trained (it never requires grad).
  Tensor<T> register_buffer(const std::string& name, Tensor<T> tensor);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    XGRAD_CHECK(module != nullptr, name_, "::register_module: module \"", name, "\" is null");
    check_new_name(name, "register_module");
    children_.emplace_back(name, module);
    return module;
  }

  // ---- traversal (PyTorch order: own entries in registration order, then each child's with
  // "child." prefixes, depth first). A tensor or module reachable twice is listed once. ----------
  Named<Tensor<T>> named_parameters(bool recurse = true) const;
  std::vector<Tensor<T>> parameters(bool recurse = true) const;
  Named<Tensor<T>> named_buffers(bool recurse = true) const;
  std::vector<Tensor<T>> buffers(bool recurse = true) const;
  // "" for this module first, then every descendant by its dotted path.
  Named<std::shared_ptr<Module<T>>> named_modules();
  Named<std::shared_ptr<Module<T>>> named_children() const { return children_; }
  std::vector<std::shared_ptr<Module<T>>> children() const;

  // ---- modes and gradients ----------------------------------------------------------------------
  // Sets the training flag of this module and every descendant.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Forgets every parameter's gradient (PyTorch 2's default), or zeroes it when set_to_none is
  // false (PyTorch 1.13's default).
  void zero_grad(bool set_to_none = true);

  // ---- state ------------------------------------------------------------------------------------
  // Copies of every parameter and buffer value, keyed as PyTorch's state_dict: at each module,
  // its parameters, then its buffers, then its children's entries.
  StateDict<T> state_dict() const;
  // Checks everything first and throws one std::invalid_argument listing every mis-shaped key
  // (with both shapes) and, when strict, every missing and unexpected key; only then copies the
  // values into the existing tensors (their identity is kept). Non-strict returns what was
  // skipped.
  LoadStateDictResult load_state_dict(const StateDict<T>& state, bool strict = true);

 protected:
  // Every tensor slot (parameters, then buffers, then children's) with its full key; the
  // pointers let load_state_dict write in place.
  void collect_state(const std::string& prefix, Named<const Tensor<T>*>& out) const;

 private:
  void check_new_name(const std::string& name, const char* what) const;

  std::string name_;
  bool training_ = true;
  Named<Tensor<T>> parameters_;
  Named<Tensor<T>> buffers_;
  Named<std::shared_ptr<Module<T>>> children_;
};

extern template class StateDict<float>;
extern template class StateDict<double>;
extern template class Module<float>;
extern template class Module<double>;

}  // namespace xgrad::nn
