// Reading a Llama-family config.json key by key with the defaults of transformers' config class for
// its model_type, refusing by name what xgrad does not implement, and writing it back.
#include <xgrad/models/llama_config.hpp>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

#include <xgrad/base/check.hpp>
#include <xgrad/base/json_input.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/serialize/hf_folder.hpp>

namespace xgrad::models {

namespace {

using json = nlohmann::json;

constexpr const char* kLoad = "load_llama_config";
// Every size must fit a 32-bit int, as in transformers' kernels.
constexpr std::int64_t kMaxSize = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kMaxId = std::numeric_limits<std::int64_t>::max();

// ---- defaults, names ---------------------------------------------------------------------------

// What a key absent from config.json means, per model_type (transformers' LlamaConfig, Qwen2Config,
// MistralConfig).
LlamaConfig defaults(const std::string& model_type) {
  LlamaConfig c;
  c.model_type = model_type;
  if (model_type == "qwen2") {
    c.vocab_size = 151936;
    c.intermediate_size = 22016;
    c.max_position_embeddings = 32768;
    c.bos_token_id.reset();  // PretrainedConfig's None
    c.eos_token_id.clear();
  } else if (model_type == "mistral") {
    c.intermediate_size = 14336;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 4096 * 32;
    c.sliding_window = 4096;
  }
  return c;
}

const char* architecture(const std::string& model_type) {
  return model_type == "qwen2"     ? "Qwen2ForCausalLM"
         : model_type == "mistral" ? "MistralForCausalLM"
                                   : "LlamaForCausalLM";
}

// Options of the family's relatives that xgrad does not implement: refused unless absent, null or
// the value that turns them off.
struct Unimplemented {
  const char* key;
  json off;
  const char* what;
};

const std::vector<Unimplemented>& unimplemented() {
  static const std::vector<Unimplemented> options = {
      {"attn_logit_softcapping", nullptr, "soft-capping of the attention logits"},
      {"final_logit_softcapping", nullptr, "soft-capping of the final logits"},
      {"query_pre_attn_scalar", nullptr, "a query scale other than head_dim^-0.5"},
      {"quantization_config", nullptr, "quantized weights"},
      {"num_experts", 0, "a mixture of experts"},
      {"num_local_experts", 0, "a mixture of experts"},
      {"use_qk_norm", false, "RMSNorm on the queries and keys"},
      {"rope_interleaved", false, "RoPE on interleaved pairs (transformers rotates halves)"},
      {"use_mrope", false, "multimodal RoPE"},
      {"pretraining_tp", 1, "pretraining_tp other than 1"},
      {"attention_dropout", 0, "dropout on the attention weights"},
  };
  return options;
}

// ---- reading -----------------------------------------------------------------------------------

std::int64_t dim_size(const JsonValue& v) { return v.integer<std::int64_t>(1, kMaxSize); }

// A key's value, or `fallback` when it is absent (null counts as given: the caller decides).
template <class F>
auto get_or(const JsonValue& root, const char* key, F read, decltype(read(root)) fallback) {
  return root.json().contains(key) ? read(root.at(key)) : fallback;
}

std::optional<std::int64_t> token_id(const JsonValue& v, std::int64_t lo = 0) {
  if (v.is_null()) return std::nullopt;
  return v.integer<std::int64_t>(lo, kMaxId);
}

// An id, a list of ids, or null (none).
std::vector<std::int64_t> token_ids(const JsonValue& v) {
  if (v.is_null()) return {};
  if (!v.is_array()) return {*token_id(v)};
  std::vector<std::int64_t> ids;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v.at(i).is_null()) v.at(i).fail_expected("a token id");
    ids.push_back(*token_id(v.at(i)));
  }
  return ids;
}

void refuse_unimplemented(const JsonValue& root) {
  for (const Unimplemented& u : unimplemented()) {
    const JsonValue v = root.at_or_null(u.key);
    if (!v.is_null() && v.json() != u.off)
      v.fail(detail::concat(describe_json(v.json()), ": xgrad's Llama does not implement ", u.what, " (only ",
                            u.off.is_null() ? "null" : u.off.dump() + " or null", ")"));
  }
}

std::string read_hidden_act(const JsonValue& root) {
  const std::string act = get_or(
      root, "hidden_act", [](const JsonValue& v) { return v.string(); }, std::string("silu"));
  if (act != "silu")
    root.at("hidden_act").fail(detail::concat(describe_json(json(act)), ": xgrad's Llama implements only \"silu\""));
  return act;
}

// rope_scaling, or rope_parameters (its rope_theta and partial_rotary_factor read by the caller).
RopeScaling read_scaling(const JsonValue& s, bool parameters) {
  s.expect_object();
  static const std::vector<std::string> known = {
      "rope_type", "type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  for (const auto& item : s.json().items())
    if (std::find(known.begin(), known.end(), item.key()) == known.end() &&
        !(parameters && (item.key() == "rope_theta" || item.key() == "partial_rotary_factor")))
      s.at(item.key())
          .fail(detail::concat(describe_json(item.value()), ": xgrad's RoPE does not know this key (",
                               "it implements the rope types \"default\", \"linear\" and \"llama3\")"));
  RopeScaling r;
  if (s.has("rope_type") && s.has("type") && s.at("rope_type").string() != s.at("type").string())
    s.fail(detail::concat("\"rope_type\" (", s.at("rope_type").string(), ") and \"type\" (", s.at("type").string(),
                          ") differ"));
  if (s.has("rope_type"))
    r.rope_type = s.at("rope_type").string();
  else if (s.has("type"))
    r.rope_type = s.at("type").string();
  else if (!parameters)
    s.fail("no \"rope_type\" (or \"type\"): \"default\", \"linear\" or \"llama3\"");
  if (r.rope_type != "default" && r.rope_type != "linear" && r.rope_type != "llama3")
    s.at(s.has("rope_type") ? "rope_type" : "type")
        .fail(detail::concat(describe_json(json(r.rope_type)),
                             ": xgrad implements the rope types \"default\", \"linear\" and \"llama3\""));
  const double kMax = std::numeric_limits<double>::max();
  if (r.rope_type != "default") r.factor = s.at("factor").number(std::numeric_limits<double>::min(), kMax);
  if (r.rope_type == "llama3") {
    r.low_freq_factor = s.at("low_freq_factor").number(std::numeric_limits<double>::min(), kMax);
    r.high_freq_factor = s.at("high_freq_factor").number(std::numeric_limits<double>::min(), kMax);
    if (!(r.high_freq_factor > r.low_freq_factor))
      s.fail(detail::concat("\"high_freq_factor\" (", r.high_freq_factor, ") must exceed \"low_freq_factor\" (",
                            r.low_freq_factor, ")"));
    r.original_max_position_embeddings = dim_size(s.at("original_max_position_embeddings"));
  }
  return r;
}

double rope_theta(const JsonValue& v) { return v.number(std::numeric_limits<double>::min(), 1e300); }
double partial_rotary_factor(const JsonValue& v) { return v.number(std::numeric_limits<double>::min(), 1.0); }

// rope_theta, rope_scaling, partial_rotary_factor: 4.x's keys or 5.x's rope_parameters.
void read_rope(const JsonValue& root, LlamaConfig& c) {
  if (root.has("partial_rotary_factor"))
    c.partial_rotary_factor = partial_rotary_factor(root.at("partial_rotary_factor"));
  const JsonValue params = root.at_or_null("rope_parameters");
  if (params.is_null()) {
    if (root.has("rope_theta")) c.rope_theta = rope_theta(root.at("rope_theta"));
    const JsonValue scaling = root.at_or_null("rope_scaling");
    if (!scaling.is_null()) c.rope_scaling = read_scaling(scaling, false);
    return;
  }
  if (root.has("rope_scaling"))
    root.at("rope_scaling").fail("given with \"rope_parameters\": one of the two says how RoPE scales");
  c.rope_scaling = read_scaling(params, true);
  if (params.has("rope_theta")) c.rope_theta = rope_theta(params.at("rope_theta"));
  if (root.has("rope_theta") && rope_theta(root.at("rope_theta")) != c.rope_theta)
    root.at("rope_theta").fail(detail::concat("differs from \"rope_parameters\"'s rope_theta (", c.rope_theta, ")"));
  if (params.has("partial_rotary_factor"))
    c.partial_rotary_factor = partial_rotary_factor(params.at("partial_rotary_factor"));
}

// The sizes and their consistency: heads, kv heads, head_dim.
void read_sizes(const JsonValue& root, LlamaConfig& c) {
  c.vocab_size = get_or(root, "vocab_size", dim_size, c.vocab_size);
  c.hidden_size = get_or(root, "hidden_size", dim_size, c.hidden_size);
  c.intermediate_size = get_or(root, "intermediate_size", dim_size, c.intermediate_size);
  c.num_hidden_layers = get_or(root, "num_hidden_layers", dim_size, c.num_hidden_layers);
  c.num_attention_heads = get_or(root, "num_attention_heads", dim_size, c.num_attention_heads);
  c.max_position_embeddings = get_or(root, "max_position_embeddings", dim_size, c.max_position_embeddings);
  if (c.model_type == "llama") c.num_key_value_heads = c.num_attention_heads;
  const JsonValue kv = root.at_or_null("num_key_value_heads");
  if (root.json().contains("num_key_value_heads"))
    c.num_key_value_heads = kv.is_null() ? c.num_attention_heads : dim_size(kv);
  if (root.has("head_dim")) {
    c.head_dim = dim_size(root.at("head_dim"));
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      root.fail(detail::concat("no \"head_dim\", and \"num_attention_heads\" (", c.num_attention_heads,
                               ") does not divide \"hidden_size\" (", c.hidden_size, ")"));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
}

// qwen2 and mistral have fixed biases: a config that asks for others is refused.
void read_biases(const JsonValue& root, LlamaConfig& c) {
  const auto flag = [](const JsonValue& v) { return v.boolean(); };
  c.attention_bias = get_or(root, "attention_bias", flag, false);
  c.mlp_bias = get_or(root, "mlp_bias", flag, false);
  if (c.model_type == "llama") return;
  const char* layout =
      c.model_type == "qwen2" ? "q/k/v_proj always have biases, o_proj and the MLP none" : "no projection has a bias";
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (root.has(key) && root.at(key).boolean())
      root.at(key).fail(detail::concat("true: transformers' ", c.model_type, " ignores it (", layout, ")"));
}

// The attention window (LlamaConfig::sliding_window): mistral's, or qwen2's when some layer uses it.
std::optional<std::int64_t> read_window(const JsonValue& root, const LlamaConfig& c) {
  if (c.model_type == "llama") return std::nullopt;  // LlamaConfig has none
  const JsonValue w = root.at_or_null("sliding_window");
  std::optional<std::int64_t> window = 4096;  // both classes' default
  if (root.json().contains("sliding_window")) window = w.is_null() ? std::nullopt : std::optional(dim_size(w));
  if (c.model_type == "mistral") return window;
  const bool use = get_or(
      root, "use_sliding_window", [](const JsonValue& v) { return v.boolean(); }, false);
  const std::int64_t first = get_or(
      root, "max_window_layers", [](const JsonValue& v) { return v.integer<std::int64_t>(0, kMaxSize); }, 28);
  bool windowed = first < c.num_hidden_layers;  // layers first.. use the window
  const JsonValue types = root.at_or_null("layer_types");
  if (!types.is_null()) {
    types.expect_array();
    if (static_cast<std::int64_t>(types.size()) != c.num_hidden_layers)
      types.fail(detail::concat("has ", types.size(), " entries for ", c.num_hidden_layers, " layers"));
    windowed = false;
    for (std::size_t i = 0; i < types.size(); ++i) {
      const std::string t = types.at(i).string();
      if (t != "full_attention" && t != "sliding_attention")
        types.at(i).fail(detail::concat(describe_json(json(t)),
                                        ": xgrad implements \"full_attention\" and "
                                        "\"sliding_attention\""));
      windowed = windowed || t == "sliding_attention";
    }
  }
  return use && windowed ? window : std::nullopt;
}

std::string read_dtype(const JsonValue& root) {
  std::string dtype;
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!root.has(key)) continue;
    const std::string d = root.at(key).string();
    if (d != "float32" && d != "float16" && d != "bfloat16" && d != "float64")
      root.at(key).fail(
          detail::concat(describe_json(json(d)), ": xgrad reads float32, float16, bfloat16 and float64 weights"));
    if (!dtype.empty() && d != dtype) root.at(key).fail(detail::concat("differs from \"torch_dtype\" (", dtype, ")"));
    dtype = d;
  }
  return dtype;
}

// What makes the config's fields inconsistent ("" when nothing): LlamaConfig::check's message.
std::string inconsistency(const LlamaConfig& c) {
  const std::pair<const char*, std::int64_t> sizes[] = {{"vocab_size", c.vocab_size},
                                                        {"hidden_size", c.hidden_size},
                                                        {"intermediate_size", c.intermediate_size},
                                                        {"num_hidden_layers", c.num_hidden_layers},
                                                        {"num_attention_heads", c.num_attention_heads},
                                                        {"num_key_value_heads", c.num_key_value_heads},
                                                        {"head_dim", c.head_dim},
                                                        {"max_position_embeddings", c.max_position_embeddings}};
  for (const auto& [key, value] : sizes)
    if (value < 1 || value > kMaxSize) return detail::concat("\"", key, "\" is ", value, ": expected 1 to ", kMaxSize);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return detail::concat("\"num_key_value_heads\" (", c.num_key_value_heads, ") must divide \"num_attention_heads\" (",
                          c.num_attention_heads, ")");
  if (c.rotary_dim() < 2 || c.rotary_dim() % 2 != 0)
    return detail::concat("RoPE rotates head_dim * partial_rotary_factor = ", c.rotary_dim(),
                          " dims per head, which must be even and at least 2 (head_dim ", c.head_dim,
                          ", partial_rotary_factor ", c.partial_rotary_factor, ")");
  if (c.sliding_window && *c.sliding_window < 1)
    return detail::concat("\"sliding_window\" is ", *c.sliding_window, ": expected at least 1 or null");
  return "";
}

// ---- writing -----------------------------------------------------------------------------------

json token_json(const std::optional<std::int64_t>& id) { return id ? json(*id) : json(nullptr); }

json token_json(const std::vector<std::int64_t>& ids) {
  if (ids.empty()) return nullptr;
  return ids.size() == 1 ? json(ids[0]) : json(ids);
}

json scaling_json(const RopeScaling& r) {
  json s = {{"rope_type", r.rope_type}};
  if (r.rope_type != "default") s["factor"] = r.factor;
  if (r.rope_type == "llama3") {
    s["low_freq_factor"] = r.low_freq_factor;
    s["high_freq_factor"] = r.high_freq_factor;
    s["original_max_position_embeddings"] = r.original_max_position_embeddings;
  }
  return s;
}

// RoPE's keys in the spelling `j` uses: 5.x's rope_parameters, else rope_theta and rope_scaling.
void write_rope(json& j, const LlamaConfig& c, const LlamaConfig& was, bool all) {
  const bool theta = all || c.rope_theta != was.rope_theta, scaling = all || c.rope_scaling != was.rope_scaling;
  const bool partial = all || c.partial_rotary_factor != was.partial_rotary_factor;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    json& p = j["rope_parameters"];
    if (scaling) {
      json kept = p.contains("partial_rotary_factor") ? p["partial_rotary_factor"] : json();
      p = scaling_json(c.rope_scaling);
      if (!kept.is_null()) p["partial_rotary_factor"] = kept;
    }
    if (theta || scaling) p["rope_theta"] = c.rope_theta;
    if (partial) (p.contains("partial_rotary_factor") ? p : j)["partial_rotary_factor"] = c.partial_rotary_factor;
    if (j.contains("rope_theta")) j["rope_theta"] = c.rope_theta;
    return;
  }
  if (theta) j["rope_theta"] = c.rope_theta;
  if (scaling) j["rope_scaling"] = c.rope_scaling.rope_type == "default" ? json(nullptr) : scaling_json(c.rope_scaling);
  if (partial && (!all || c.partial_rotary_factor != 1.0)) j["partial_rotary_factor"] = c.partial_rotary_factor;
}

void write_window(json& j, const LlamaConfig& c, const LlamaConfig& was, bool all) {
  if (c.model_type == "llama" || (!all && c.sliding_window == was.sliding_window)) return;
  const json window = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
  if (c.model_type == "mistral") {
    j["sliding_window"] = window;
    return;
  }
  j["use_sliding_window"] = c.sliding_window.has_value();  // qwen2: every layer uses the window
  if (c.sliding_window) {
    j["sliding_window"] = window;
    j["max_window_layers"] = 0;
    j.erase("layer_types");
  }
}

}  // namespace

bool operator==(const LlamaConfig& a, const LlamaConfig& b) {
  return a.model_type == b.model_type && a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
         a.intermediate_size == b.intermediate_size && a.num_hidden_layers == b.num_hidden_layers &&
         a.num_attention_heads == b.num_attention_heads && a.num_key_value_heads == b.num_key_value_heads &&
         a.head_dim == b.head_dim && a.max_position_embeddings == b.max_position_embeddings &&
         a.rms_norm_eps == b.rms_norm_eps && a.rope_theta == b.rope_theta && a.rope_scaling == b.rope_scaling &&
         a.partial_rotary_factor == b.partial_rotary_factor && a.attention_bias == b.attention_bias &&
         a.mlp_bias == b.mlp_bias && a.hidden_act == b.hidden_act && a.tie_word_embeddings == b.tie_word_embeddings &&
         a.bos_token_id == b.bos_token_id && a.pad_token_id == b.pad_token_id && a.eos_token_id == b.eos_token_id &&
         a.torch_dtype == b.torch_dtype && a.sliding_window == b.sliding_window;
}

void LlamaConfig::check() const {
  const std::string problem = inconsistency(*this);
  if (!problem.empty()) throw std::invalid_argument("LlamaConfig: " + problem);
}

std::int64_t LlamaConfig::rotary_dim() const {
  return static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);  // transformers' int()
}

LlamaConfig parse_llama_config(const json& config, const std::string& file) {
  const JsonValue root(detail::concat(kLoad, ": '", file, "'"), config);
  if (!root.is_object()) root.fail_expected("a JSON object");
  if (!root.has("model_type")) root.fail("no \"model_type\": xgrad reads \"llama\", \"qwen2\" and \"mistral\"");
  const std::string model_type = root.at("model_type").string();
  if (model_type != "llama" && model_type != "qwen2" && model_type != "mistral")
    root.at("model_type")
        .fail(detail::concat(describe_json(json(model_type)), ": xgrad reads \"llama\", \"qwen2\" and \"mistral\""));
  refuse_unimplemented(root);
  LlamaConfig c = defaults(model_type);
  read_sizes(root, c);
  c.rms_norm_eps = get_or(
      root, "rms_norm_eps", [](const JsonValue& v) { return v.number(0.0, 1.0); }, c.rms_norm_eps);
  c.hidden_act = read_hidden_act(root);
  read_rope(root, c);
  if (const std::string problem = inconsistency(c); !problem.empty()) root.fail(problem);
  read_biases(root, c);
  c.tie_word_embeddings = get_or(
      root, "tie_word_embeddings", [](const JsonValue& v) { return v.boolean(); }, false);
  c.bos_token_id = get_or(
      root, "bos_token_id", [](const JsonValue& v) { return token_id(v); }, c.bos_token_id);
  c.pad_token_id = get_or(
      root, "pad_token_id", [](const JsonValue& v) { return token_id(v, -1); }, c.pad_token_id);
  c.eos_token_id = get_or(root, "eos_token_id", token_ids, c.eos_token_id);
  c.torch_dtype = read_dtype(root);
  c.sliding_window = read_window(root, c);
  c.source = config;
  return c;
}

GenerationConfig parse_generation_config(const json& generation, const std::string& file) {
  const JsonValue root(detail::concat(kLoad, ": '", file, "'"), generation);
  if (!root.is_object()) root.fail_expected("a JSON object");
  GenerationConfig g;
  g.bos_token_id = token_id(root.at_or_null("bos_token_id"));
  g.pad_token_id = token_id(root.at_or_null("pad_token_id"), -1);
  g.eos_token_id = token_ids(root.at_or_null("eos_token_id"));
  g.json = generation;
  return g;
}

LlamaConfig load_llama_config(const std::string& dir) {
  LlamaConfig c = parse_llama_config(read_hf_config(kLoad, dir), hf_file(dir, "config.json"));
  if (auto generation = read_hf_generation_config(kLoad, dir))
    c.generation_config = parse_generation_config(*generation, hf_file(dir, "generation_config.json"));
  return c;
}

json LlamaConfig::to_json() const {
  // Every key for a config built in code, or one whose model_type changed (the defaults differ).
  const bool all = !source.is_object() || !source.contains("model_type") || source["model_type"] != model_type;
  json j = source.is_object() ? source : json::object();
  if (all) j["architectures"] = {architecture(model_type)};
  const LlamaConfig was = all ? LlamaConfig() : parse_llama_config(source, "LlamaConfig::source");
  const auto put = [&](const char* key, const json& value, bool changed) {
    if (all || changed) j[key] = value;
  };
  put("model_type", model_type, model_type != was.model_type);
  put("vocab_size", vocab_size, vocab_size != was.vocab_size);
  put("hidden_size", hidden_size, hidden_size != was.hidden_size);
  put("intermediate_size", intermediate_size, intermediate_size != was.intermediate_size);
  put("num_hidden_layers", num_hidden_layers, num_hidden_layers != was.num_hidden_layers);
  put("num_attention_heads", num_attention_heads, num_attention_heads != was.num_attention_heads);
  put("num_key_value_heads", num_key_value_heads, num_key_value_heads != was.num_key_value_heads);
  put("head_dim", head_dim, head_dim != was.head_dim);
  put("max_position_embeddings", max_position_embeddings, max_position_embeddings != was.max_position_embeddings);
  put("rms_norm_eps", rms_norm_eps, rms_norm_eps != was.rms_norm_eps);
  put("hidden_act", hidden_act, hidden_act != was.hidden_act);
  put("tie_word_embeddings", tie_word_embeddings, tie_word_embeddings != was.tie_word_embeddings);
  if (model_type == "llama" || !all) {
    put("attention_bias", attention_bias, attention_bias != was.attention_bias);
    put("mlp_bias", mlp_bias, mlp_bias != was.mlp_bias);
  }
  put("bos_token_id", token_json(bos_token_id), bos_token_id != was.bos_token_id);
  put("eos_token_id", token_json(eos_token_id), eos_token_id != was.eos_token_id);
  put("pad_token_id", token_json(pad_token_id), pad_token_id != was.pad_token_id);
  const char* dtype_key = j.contains("dtype") && !j.contains("torch_dtype") ? "dtype" : "torch_dtype";
  put(dtype_key, torch_dtype.empty() ? json(nullptr) : json(torch_dtype), torch_dtype != was.torch_dtype);
  write_rope(j, *this, was, all);
  write_window(j, *this, was, all);
  try {
    XGRAD_CHECK(parse_llama_config(j, "LlamaConfig::to_json") == *this,
                "LlamaConfig::to_json: the config cannot be written as config.json: it would read back differently "
                "(a field that its model_type does not have, such as a sliding_window for llama?)");
  } catch (const FormatError& e) {
    throw std::invalid_argument(
        detail::concat("LlamaConfig::to_json: the config would be refused when read back: ", e.what()));
  }
  return j;
}

}  // namespace xgrad::models
