// Hugging Face GPT-2 folders. Loading trusts the folder for nothing: config.json is checked key by
// key, then every tensor's name, dtype and shape in the safetensors headers against the config,
// and only then is the model built and are the tensors read (a forged config cannot make it
// allocate more than the files hold). Saving stages the three files before renaming any into place.
#include <xgrad/models/hf_gpt2.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/base/json_input.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/serialize/hf_folder.hpp>
#include <xgrad/serialize/safetensors.hpp>

namespace xgrad::models {

namespace {

using json = nlohmann::json;

constexpr const char* kLoad = "load_hf_gpt2";
constexpr const char* kSave = "save_hf_gpt2";
// Every size of the config (the model's dims) must fit a 32-bit int, as in transformers' kernels.
constexpr std::int64_t kMaxSize = std::numeric_limits<std::int32_t>::max();
// GPT-2's <|endoftext|>, GPT2Config's bos_token_id and eos_token_id.
constexpr std::int64_t kEndOfText = 50256;
// The transformers release whose save_pretrained files save_hf_gpt2 writes (tests/fixtures/hf-gpt2-tiny
// was made with it).
constexpr const char* kTransformersVersion = "5.17.0";

template <class... Args>
[[noreturn]] void malformed(const std::string& file, const Args&... args) {
  throw FormatError(detail::concat(kLoad, ": '", file, "': ", args...));
}

// A string as a JSON literal (control characters escaped, invalid UTF-8 replaced).
std::string quote(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

// A JSON value for an error message, in a few words (never dumped whole: it may be deep or long).
std::string excerpt(const json& v) { return describe_json(v); }

// ---- config.json -----------------------------------------------------------------------------

// The keys of config.json, each absent one taking GPT2Config's default.
class ConfigReader {
 public:
  ConfigReader(std::string path, const json& root) : path_(std::move(path)), root_(root) {}

  const json* find(const char* key) const {
    const auto it = root_.find(key);
    return it == root_.end() ? nullptr : &*it;
  }

  // A size in [1, kMaxSize].
  std::int64_t size(const char* key, std::int64_t fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (v->is_number_unsigned() && v->get<std::uint64_t>() >= 1 && v->get<std::uint64_t>() <= std::uint64_t(kMaxSize))
      return static_cast<std::int64_t>(v->get<std::uint64_t>());
    if (v->is_number_integer() && !v->is_number_unsigned() && v->get<std::int64_t>() >= 1 &&
        v->get<std::int64_t>() <= kMaxSize)
      return v->get<std::int64_t>();
    malformed(path_, quote(key), " must be an integer in [1, ", kMaxSize, "], got ", excerpt(*v));
  }

  // A finite number in [lo, hi].
  double number(const char* key, double fallback, double lo, double hi) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (v->is_number()) {
      const double x = v->get<double>();
      if (std::isfinite(x) && x >= lo && x <= hi) return x;
    }
    malformed(path_, quote(key), " must be a number in [", lo, ", ", hi, "], got ", excerpt(*v));
  }

  bool boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) malformed(path_, quote(key), " must be true or false, got ", excerpt(*v));
    return v->get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) malformed(path_, quote(key), " must be a string, got ", excerpt(*v));
    return v->get<std::string>();
  }

  // A token id: an integer >= 0, or null (-1: none); GPT2Config's 50256 when absent. It is not
  // checked against vocab_size: transformers writes 50256 for any vocabulary.
  std::int64_t token_id(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return kEndOfText;
    if (v->is_null()) return -1;
    if (v->is_number_unsigned() && v->get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      return static_cast<std::int64_t>(v->get<std::uint64_t>());
    if (v->is_number_integer() && !v->is_number_unsigned() && v->get<std::int64_t>() >= 0)
      return v->get<std::int64_t>();
    malformed(path_, quote(key), " must be a token id (an integer >= 0) or null, got ", excerpt(*v));
  }

  // An option xgrad implements only at its default value: refused by name otherwise.
  void require_default(const char* key, bool default_value) const {
    if (boolean(key, default_value) != default_value)
      malformed(path_, quote(key), " is ", !default_value ? "true" : "false",
                ": xgrad's GPT does not implement it (it implements only ", default_value ? "true" : "false", ")");
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const json& root_;
};

// transformers' activation_function names that xgrad implements exactly -> GPTConfig::activation.
const std::map<std::string, std::string>& activations() {
  static const std::map<std::string, std::string> names = {
      {"gelu_new", "gelu_tanh"}, {"gelu_pytorch_tanh", "gelu_tanh"}, {"gelu", "gelu"}, {"relu", "relu"}};
  return names;
}

GPTConfig parse_config(const std::string& path, const json& root) {
  if (!root.is_object()) malformed(path, "the config is not a JSON object (it is ", root.type_name(), ")");
  const ConfigReader r(path, root);
  const json* model_type = r.find("model_type");
  if (model_type == nullptr)
    malformed(path, "no \"model_type\": a GPT-2 config says \"model_type\": \"gpt2\"");
  if (!model_type->is_string() || model_type->get<std::string>() != "gpt2")
    malformed(path, "\"model_type\" is ", excerpt(*model_type), ": load_hf_gpt2 reads only \"gpt2\"");

  GPTConfig c;
  c.vocab_size = r.size("vocab_size", 50257);
  c.block_size = r.size("n_positions", 1024);
  c.n_embd = r.size("n_embd", 768);
  c.n_layer = r.size("n_layer", 12);
  c.n_head = r.size("n_head", 12);
  if (c.n_embd % c.n_head != 0)
    malformed(path, "\"n_head\" (", c.n_head, ") must divide \"n_embd\" (", c.n_embd, ")");
  const json* n_inner = r.find("n_inner");
  c.n_inner = n_inner == nullptr || n_inner->is_null() ? 0 : r.size("n_inner", 0);
  c.layer_norm_eps = r.number("layer_norm_epsilon", 1e-5, 0.0, 1.0);
  c.bias = true;
  c.bos_token_id = r.token_id("bos_token_id");
  c.eos_token_id = r.token_id("eos_token_id");

  const std::string activation = r.string("activation_function", "gelu_new");
  const auto it = activations().find(activation);
  if (it == activations().end())
    malformed(path, "\"activation_function\" is ", quote(activation),
              ": xgrad implements gelu_new, gelu_pytorch_tanh, gelu and relu");
  c.activation = it->second;

  const double attn = r.number("attn_pdrop", 0.1, 0.0, 1.0), embd = r.number("embd_pdrop", 0.1, 0.0, 1.0),
               resid = r.number("resid_pdrop", 0.1, 0.0, 1.0);
  if (attn != embd || attn != resid)
    malformed(path, "\"attn_pdrop\", \"embd_pdrop\" and \"resid_pdrop\" differ (", attn, ", ", embd, ", ", resid,
              "): xgrad's GPT has one dropout probability");
  c.dropout = attn;

  r.require_default("scale_attn_weights", true);
  r.require_default("scale_attn_by_inverse_layer_idx", false);
  r.require_default("reorder_and_upcast_attn", false);
  r.require_default("add_cross_attention", false);
  r.require_default("tie_word_embeddings", true);
  return c;
}

// ---- the tensors -------------------------------------------------------------------------------

// One tensor of the checkpoint: its Hugging Face name and stored shape, and GPT's name for it.
struct Slot {
  std::string hf;
  Shape shape;
  std::string xgrad;
  bool conv1d = false;  // stored (in, out): GPT's Linear takes the transpose
};

// Calls fn(slot) for every tensor of a GPT-2 of config c, in GPT's state_dict order; fn may throw
// to stop (so a forged n_layer costs nothing beyond the first missing tensor).
template <class Fn>
void for_each_slot(const GPTConfig& c, const std::string& prefix, Fn&& fn) {
  const auto C = static_cast<std::size_t>(c.n_embd), V = static_cast<std::size_t>(c.vocab_size),
             P = static_cast<std::size_t>(c.block_size);
  const auto F = static_cast<std::size_t>(c.n_inner > 0 ? c.n_inner : 4 * c.n_embd);
  fn(Slot{prefix + "wte.weight", {V, C}, "wte.weight"});
  fn(Slot{prefix + "wpe.weight", {P, C}, "wpe.weight"});
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const std::string hf = prefix + "h." + std::to_string(i) + ".", x = "h.layers." + std::to_string(i) + ".";
    fn(Slot{hf + "attn.c_attn.weight", {C, 3 * C}, x + "self_attn.in_proj_weight", true});
    fn(Slot{hf + "attn.c_attn.bias", {3 * C}, x + "self_attn.in_proj_bias"});
    fn(Slot{hf + "attn.c_proj.weight", {C, C}, x + "self_attn.out_proj.weight", true});
    fn(Slot{hf + "attn.c_proj.bias", {C}, x + "self_attn.out_proj.bias"});
    fn(Slot{hf + "mlp.c_fc.weight", {C, F}, x + "linear1.weight", true});
    fn(Slot{hf + "mlp.c_fc.bias", {F}, x + "linear1.bias"});
    fn(Slot{hf + "mlp.c_proj.weight", {F, C}, x + "linear2.weight", true});
    fn(Slot{hf + "mlp.c_proj.bias", {C}, x + "linear2.bias"});
    fn(Slot{hf + "ln_1.weight", {C}, x + "norm1.weight"});
    fn(Slot{hf + "ln_1.bias", {C}, x + "norm1.bias"});
    fn(Slot{hf + "ln_2.weight", {C}, x + "norm2.weight"});
    fn(Slot{hf + "ln_2.bias", {C}, x + "norm2.bias"});
  }
  fn(Slot{prefix + "ln_f.weight", {C}, "ln_f.weight"});
  fn(Slot{prefix + "ln_f.bias", {C}, "ln_f.bias"});
}

// The checkpoint's files and tensors, from their headers, with the prefix of its names.
struct Checkpoint : HFWeights {
  std::string prefix;  // "transformer." or ""
};

// h.{i}.attn.bias or h.{i}.attn.masked_bias with i < n_layer: the causal mask buffers.
bool is_mask_buffer(const std::string& name, const std::string& prefix, std::int64_t n_layer) {
  if (name.compare(0, prefix.size() + 2, prefix + "h.") != 0) return false;
  std::size_t at = prefix.size() + 2, digits = 0;
  std::int64_t layer = 0;
  while (at < name.size() && name[at] >= '0' && name[at] <= '9' && digits < 10) {
    layer = layer * 10 + (name[at++] - '0');
    ++digits;
  }
  if (digits == 0 || (digits > 1 && name[prefix.size() + 2] == '0') || layer >= n_layer) return false;
  const std::string rest = name.substr(at);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

// The checkpoint's files and tensors, with the prefix of its names.
Checkpoint read_checkpoint_headers(const std::string& dir) {
  Checkpoint ck{read_hf_weights(dir, kLoad), ""};
  ck.prefix =
      ck.tensors.count("wte.weight") != 0 && ck.tensors.count("transformer.wte.weight") == 0 ? "" : "transformer.";
  return ck;
}

// config.json's sizes against the stored shapes, so that a forged size is refused, naming its key,
// before a model of that size is allocated: vocab_size and n_embd against wte, n_positions against
// wpe, n_inner against the first c_fc, n_layer against the last layer's c_attn. A tensor that is
// missing or not 2-D here is left to read_checkpoint's check, which names it.
void check_sizes(const std::string& config_path, const GPTConfig& c, const Checkpoint& ck) {
  const auto dim = [&](const std::string& said, std::int64_t value, const std::string& tensor, std::size_t axis,
                       const char* what) {
    const auto it = ck.tensors.find(ck.prefix + tensor);
    if (it == ck.tensors.end() || it->second.entry.shape.size() != 2) return;
    const std::size_t stored = it->second.entry.shape[axis];
    if (stored != static_cast<std::size_t>(value))
      malformed(config_path, said, " but ", quote(ck.prefix + tensor), " in '", it->second.file, "' has ", stored, " ",
                what);
  };
  dim(detail::concat("\"vocab_size\" is ", c.vocab_size), c.vocab_size, "wte.weight", 0, "rows");
  dim(detail::concat("\"n_embd\" is ", c.n_embd), c.n_embd, "wte.weight", 1, "columns");
  dim(detail::concat("\"n_positions\" is ", c.block_size), c.block_size, "wpe.weight", 0, "rows");
  const std::int64_t F = c.n_inner > 0 ? c.n_inner : 4 * c.n_embd;
  dim(c.n_inner > 0 ? detail::concat("\"n_inner\" is ", F) : detail::concat("\"n_inner\" is null (4 n_embd = ", F, ")"),
      F, "h.0.mlp.c_fc.weight", 1, "columns");
  const std::string last = ck.prefix + "h." + std::to_string(c.n_layer - 1) + ".attn.c_attn.weight";
  if (ck.tensors.count(last) == 0)
    malformed(config_path, "\"n_layer\" is ", c.n_layer, " but '", ck.listing, "' has no ", quote(last), " (no layer ",
              c.n_layer - 1, ")");
}

// Reads the headers and checks every tensor against config c (`origin`: where c comes from).
Checkpoint read_checkpoint(const std::string& dir, const GPTConfig& c, const char* origin) {
  Checkpoint ck = read_checkpoint_headers(dir);
  std::set<std::string> used;
  const auto check = [&](const std::string& name, const Shape& shape) {
    expect_hf_tensor(ck, name, shape, origin, kLoad);
    used.insert(name);
  };
  for_each_slot(c, ck.prefix, [&](const Slot& slot) { check(slot.hf, slot.shape); });
  for (const auto& [name, source] : ck.tensors) {
    if (used.count(name) != 0 || is_mask_buffer(name, ck.prefix, c.n_layer)) continue;
    if (name == "lm_head.weight") {
      check(name, {static_cast<std::size_t>(c.vocab_size), static_cast<std::size_t>(c.n_embd)});
      continue;
    }
    malformed(source.file, "unexpected tensor ", quote(name), ": not one of GPT-2's (names ",
              ck.prefix.empty() ? "without a prefix, as wte.weight" : "with the prefix \"transformer.\"", ")");
  }
  return ck;
}

template <class T>
Array<T> transposed(const Array<T>& a) {  // (rows, cols) -> (cols, rows)
  const std::size_t rows = a.shape(0), cols = a.shape(1);
  Array<T> t = empty_array<T>(Shape{cols, rows}, "load_hf_gpt2 (Conv1D transpose)");
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) t.data()[j * rows + i] = a.data()[i * cols + j];
  return t;
}

// Reads the tensors of a checked checkpoint into GPT's state_dict.
template <class T>
nn::StateDict<T> read_state(const Checkpoint& ck, const GPTConfig& c) {
  // The mask buffers, of any dtype (BOOL, U8), are not read.
  std::map<std::string, Array<T>> values = load_hf_tensors<T>(
      ck, [&](const std::string& name) { return !is_mask_buffer(name, ck.prefix, c.n_layer); }, kLoad);
  nn::StateDict<T> state;
  for_each_slot(c, ck.prefix, [&](const Slot& slot) {
    Array<T>& v = values.at(slot.hf);  // there, of its shape: read_checkpoint and load_hf_tensors checked
    state.insert(slot.xgrad, slot.conv1d ? transposed(v) : std::move(v));
  });
  if (ck.tensors.count("lm_head.weight") != 0) {
    const Array<T>& wte = state.at("wte.weight");
    const Array<T>& head = values.at("lm_head.weight");
    // Tied means the same bits: a NaN in wte is tied to the same NaN (== would call them different).
    if (std::memcmp(head.data(), wte.data(), wte.size() * sizeof(T)) != 0)
      malformed(ck.tensors.at("lm_head.weight").file, "tensor \"lm_head.weight\" differs from \"", ck.prefix,
                "wte.weight\": xgrad's GPT ties the head to the token embedding");
  }
  return state;
}

// ---- saving ------------------------------------------------------------------------------------

// GPTConfig::activation -> transformers' activation_function.
std::string hf_activation(const std::string& activation) {
  if (activation == "gelu_tanh") return "gelu_new";
  XGRAD_CHECK(activation == "gelu" || activation == "relu", kSave, ": activation \"", activation,
              "\" has no GPT-2 name (gelu_tanh is gelu_new; gelu and relu keep theirs)");
  return activation;
}

// A token id as config.json holds it: the model's (-1: null), else the default of a model built
// here: 50256 when the vocabulary holds it, else its last id (GPTConfig's comment).
json token_id(const char* key, const std::optional<std::int64_t>& id, std::int64_t vocab_size) {
  if (!id) return std::min(kEndOfText, vocab_size - 1);
  XGRAD_CHECK(*id >= -1, kSave, ": ", key, " must be a token id >= 0, or -1 for none, got ", *id);
  return *id == -1 ? json(nullptr) : json(*id);
}

// config.json as GPT2Config.save_pretrained writes it for this model (its keys sorted, 2-space indent).
std::string hf_config_text(const GPTConfig& c) {
  json j = json::object();
  j["activation_function"] = hf_activation(c.activation);
  j["add_cross_attention"] = false;
  j["architectures"] = json::array({"GPT2LMHeadModel"});
  j["attn_pdrop"] = c.dropout;
  j["bos_token_id"] = token_id("bos_token_id", c.bos_token_id, c.vocab_size);
  j["dtype"] = "float32";
  j["embd_pdrop"] = c.dropout;
  j["eos_token_id"] = token_id("eos_token_id", c.eos_token_id, c.vocab_size);
  j["initializer_range"] = 0.02;
  j["layer_norm_epsilon"] = c.layer_norm_eps;
  j["model_type"] = "gpt2";
  j["n_embd"] = c.n_embd;
  j["n_head"] = c.n_head;
  j["n_inner"] = c.n_inner == 0 || c.n_inner == 4 * c.n_embd ? json(nullptr) : json(c.n_inner);
  j["n_layer"] = c.n_layer;
  j["n_positions"] = c.block_size;
  j["pad_token_id"] = nullptr;
  j["reorder_and_upcast_attn"] = false;
  j["resid_pdrop"] = c.dropout;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["scale_attn_weights"] = true;
  j["summary_activation"] = nullptr;
  j["summary_first_dropout"] = 0.1;
  j["summary_proj_to_labels"] = true;
  j["summary_type"] = "cls_index";
  j["summary_use_proj"] = true;
  j["tie_word_embeddings"] = true;
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

// generation_config.json: the loaded folder's, else what save_pretrained writes for a GPT-2 without
// one (GenerationConfig.from_model_config: the token ids that are not null, and the flags).
std::string hf_generation_config_text(const GPTConfig& c) {
  if (!c.generation_config.empty()) return c.generation_config;
  json j = json::object();
  j["_from_model_config"] = true;
  for (const auto& [key, id] : {std::pair{"bos_token_id", c.bos_token_id}, std::pair{"eos_token_id", c.eos_token_id}}) {
    const json v = token_id(key, id, c.vocab_size);
    if (!v.is_null()) j[key] = v;
  }
  j["output_attentions"] = false;
  j["output_hidden_states"] = false;
  j["transformers_version"] = kTransformersVersion;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

}  // namespace

GPTConfig load_hf_gpt2_config(const std::string& dir) {
  const json root = read_hf_config(kLoad, dir);
  const std::string path = hf_file(dir, "config.json");
  GPTConfig c = parse_config(path, root);
  if (const auto generation = read_hf_generation_config(kLoad, dir))
    c.generation_config = generation->dump(2) + "\n";  // as save_pretrained writes it: keys sorted, 2-space indent
  if (has_hf_weights(dir)) check_sizes(path, c, read_checkpoint_headers(dir));
  return c;
}

template <class T>
std::shared_ptr<GPT<T>> load_hf_gpt2(const std::string& dir, Generator* generator) {
  const GPTConfig config = load_hf_gpt2_config(dir);
  const Checkpoint ck = read_checkpoint(dir, config, "from config.json");
  auto model = std::make_shared<GPT<T>>(config, generator);
  model->load_state_dict(read_state<T>(ck, config));
  return model;
}

template <class T>
void load_hf_gpt2_weights(GPT<T>& model, const std::string& dir) {
  XGRAD_CHECK(model.config().bias, kLoad, ": the model has bias=false; GPT-2 has biases in every linear and LayerNorm");
  const Checkpoint ck = read_checkpoint(dir, model.config(), "for the model's config");
  model.load_state_dict(read_state<T>(ck, model.config()));
}

template <class T>
void save_hf_gpt2(const GPT<T>& model, const std::string& dir) {
  const GPTConfig& c = model.config();
  XGRAD_CHECK(c.bias, kSave, ": the model has bias=false; GPT-2 has biases in every linear and LayerNorm");
  const std::string config_text = hf_config_text(c);  // refuses an activation GPT-2 has no name for
  const std::string generation_text = hf_generation_config_text(c);
  const nn::StateDict<T> state = model.state_dict();
  NamedArrays<float> tensors;
  for_each_slot(c, "transformer.", [&](const Slot& slot) {
    const Array<T>& v = state.at(slot.xgrad);
    tensors.emplace_back(slot.hf, to_float32<T>(slot.conv1d ? transposed(v) : v));
  });
  // safetensors' Python writer orders the tensors by name (within a dtype).
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const auto text = [](const std::string& t) {
    return [&t](std::ostream& out) { out.write(t.data(), static_cast<std::streamsize>(t.size())); };
  };
  write_files_together(dir,
                       {{"config.json", text(config_text)},
                        {"model.safetensors",
                         [&](std::ostream& out) {
                           write_safetensors(out, tensors, {{"format", "pt"}});
                         }},
                        {"generation_config.json", text(generation_text)}},
                       kSave);
}

template std::shared_ptr<GPT<float>> load_hf_gpt2<float>(const std::string&, Generator*);
template std::shared_ptr<GPT<double>> load_hf_gpt2<double>(const std::string&, Generator*);
template void load_hf_gpt2_weights<float>(GPT<float>&, const std::string&);
template void load_hf_gpt2_weights<double>(GPT<double>&, const std::string&);
template void save_hf_gpt2<float>(const GPT<float>&, const std::string&);
template void save_hf_gpt2<double>(const GPT<double>&, const std::string&);

}  // namespace xgrad::models
