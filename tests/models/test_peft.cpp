// LoRA (nn/lora.hpp) and PEFT's adapter folder (models/peft.hpp) against tests/fixtures/hf-llama-tiny
// and its adapter/ (r 4, alpha 8, q_proj and v_proj, non-zero B; expected.json's "lora" numbers
// come from a port of PEFT's lora.Linear: see the README there): the adapter's logits within 1e-5
// (float) and 1e-10 (double), its loss and every lora_A / lora_B gradient within 1e-4 relative with
// no gradient reaching a frozen weight, merging into a plain folder that loads with the adapter's
// logits, unmerging back to the original weights, saving the same keys, shapes, dtypes and config
// values, and refusals naming the option, the key or the tensor with the model left unchanged.
#include "serialize_util.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/models/hf_llama.hpp>
#include <xgrad/models/peft.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/serialize/safetensors.hpp>

using namespace xgrad;
using namespace xgrad::testing;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(XGRAD_FIXTURES_DIR) + "/hf-llama-tiny";
const std::string kAdapter = kFixture + "/adapter";

const json& expected() {
  static const json e = json::parse(read_bytes(kFixture + "/expected.json"));
  return e;
}

const json& lora_expected() { return expected()["lora"]; }

IndexArray ids_of(const json& rows, std::int64_t shift = 0) {
  const std::size_t n = rows.size(), t = rows[0].size();
  IndexArray a = empty_array<std::int64_t>(Shape{n, t});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < t; ++j) {
      const std::size_t k = j + std::size_t(shift);  // labels shifted left by one: the next token's
      a(i, j) = k < t ? rows[i][k].get<std::int64_t>() : -100;
    }
  return a;
}

template <class T>
double max_logit_error(models::LlamaForCausalLM<T>& model, const std::string& key) {
  NoGradGuard no_grad;
  model.eval();
  const json& input_ids = expected()["input_ids"];
  double worst = 0;
  for (std::size_t s = 0; s < 2; ++s) {
    const Array<T> logits = model.forward(ids_of(json::array({input_ids[s]}))).value();
    const json& want = lora_expected()[key][s];
    for (std::size_t t = 0; t < want.size(); ++t)
      for (std::size_t v = 0; v < want[t].size(); ++v)
        worst = std::max(worst, std::abs(double(logits(0, t, v)) - want[t][v].get<double>()));
  }
  return worst;
}

template <class T>
std::shared_ptr<models::LlamaForCausalLM<T>> with_adapter(const std::string& adapter = kAdapter) {
  auto model = models::load_hf_llama<T>(kFixture);
  models::load_peft_adapter(*model, adapter);
  return model;
}

TEST(Peft, AdapterLogitsMatchTheFixture) {
  EXPECT_LT(max_logit_error(*with_adapter<float>(), "logits_float32"), 1e-5);
  EXPECT_LT(max_logit_error(*with_adapter<double>(), "logits_float64"), 1e-10);
}

TEST(Peft, LossAndLoraGradientsMatchTheFixtureAndFrozenWeightsGetNone) {
  auto model = with_adapter<float>();
  const Tensor<float> logits = model->forward(ids_of(lora_expected()["loss_input_ids"]));
  const IndexArray targets = ids_of(lora_expected()["loss_labels"], 1);
  const Tensor<float> loss =
      cross_entropy(reshape(logits, {-1, logits.size(-1)}), IndexArray(xt::reshape_view(targets, {targets.size()})));
  EXPECT_NEAR(loss.item(), lora_expected()["loss_float32"].get<double>(), 1e-5);
  loss.backward();
  std::size_t checked = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    const json& want = lora_expected()["grads_float32"];
    const std::string key = models::kPeftPrefix + name;
    if (!want.contains(key)) {
      EXPECT_FALSE(p.requires_grad() || p.has_grad()) << name << ": a frozen weight got a gradient";
      continue;
    }
    double worst = 0, scale = 0;
    const Array<float>& g = p.grad();
    std::size_t i = 0;
    for (const auto& r : want[key])
      for (const auto& v : r) {
        worst = std::max(worst, std::abs(double(g.data()[i++]) - v.get<double>()));
        scale = std::max(scale, std::abs(v.get<double>()));
      }
    EXPECT_EQ(i, g.size()) << name;
    EXPECT_LE(worst, 1e-4 * scale) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 8u);
}

TEST(Peft, MergeAndSaveGivesAPlainFolderWithTheAdapterLogitsAndUnmergeRestores) {
  const auto plain = models::load_hf_llama<float>(kFixture);
  auto model = with_adapter<float>();
  TempDir dir;
  models::merge_and_save_hf_llama(*model, dir.path());
  const auto merged = models::load_hf_llama<float>(dir.path());  // refuses any lora_A key
  EXPECT_LT(max_logit_error(*merged, "logits_float32"), 1e-5);
  EXPECT_FALSE(nn::lora_layers(*model)[0].second->merged());
  const auto after = model->state_dict();
  for (const auto& [name, value] : plain->state_dict()) {
    const Array<float>& now = after.at(name);
    EXPECT_LT(double(xt::amax(xt::abs(now - value))()), 1e-6) << name;
  }
  nn::merge_lora(*model);  // merged in place: the adapter's logits without its forward
  EXPECT_LT(max_logit_error(*model, "logits_float32"), 1e-5);
  EXPECT_THROW(nn::merge_lora(*model), std::invalid_argument);
  nn::unmerge_lora(*model);
  EXPECT_THROW(nn::unmerge_lora(*model), std::invalid_argument);
}

TEST(Peft, SavedAdapterHasTheFixturesKeysShapesDtypesAndConfig) {
  auto model = with_adapter<float>();
  TempDir dir;
  models::save_peft_adapter(*model, models::read_peft_config(kAdapter), dir.path(), "hf-llama-tiny");
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"adapter_config.json", "adapter_model.safetensors"}));
  const auto header = [](const std::string& d) {
    std::map<std::string, std::pair<std::string, Shape>> out;
    for (const auto& e : read_safetensors_header(d + "/adapter_model.safetensors").tensors)
      out[e.name] = {e.dtype, e.shape};
    return out;
  };
  EXPECT_EQ(header(dir.path()), header(kAdapter));
  expect_same_arrays(load_safetensors<float>(kAdapter + "/adapter_model.safetensors"), [&] {
    auto saved = load_safetensors<float>(dir.file("adapter_model.safetensors"));
    std::sort(saved.begin(), saved.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return saved;
  }());
  const json want = json::parse(read_bytes(kAdapter + "/adapter_config.json"));
  const json got = json::parse(read_bytes(dir.file("adapter_config.json")));
  for (const char* key : {"r", "lora_alpha", "target_modules", "lora_dropout", "bias", "use_rslora", "fan_in_fan_out",
                          "task_type", "peft_type", "base_model_name_or_path", "use_dora"})
    EXPECT_EQ(got.at(key), want.at(key)) << key;
}

TEST(Peft, AllLinearTargetsEveryLinearButTheHeadAndSavesTheirNames) {
  auto model = models::load_hf_llama<float>(kFixture);
  const auto names = nn::inject_lora(*model, nn::LoraConfig().r(2).target_modules({"all-linear"}));
  EXPECT_EQ(names.size(), 14u);  // 7 per layer
  EXPECT_TRUE(std::none_of(names.begin(), names.end(), [](const std::string& n) { return n == "lm_head"; }));
  TempDir dir;
  models::save_peft_adapter(*model, nn::LoraConfig().r(2).target_modules({"all-linear"}), dir.path(), "tiny");
  const json got = json::parse(read_bytes(dir.file("adapter_config.json")));
  EXPECT_EQ(got.at("target_modules"),
            json({"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}));
  auto again = models::load_hf_llama<float>(kFixture);
  models::load_peft_adapter(*again, dir.path());
  expect_same_state_dict(model->state_dict(), again->state_dict());
}

// The fixture's adapter with adapter_config.json edited, or its weights replaced.
struct EditedAdapter {
  TempDir dir;
  explicit EditedAdapter(const std::function<void(json&)>& edit) {
    json c = json::parse(read_bytes(kAdapter + "/adapter_config.json"));
    edit(c);
    write_bytes(dir.file("adapter_config.json"), c.dump(2));
    fs::copy_file(kAdapter + "/adapter_model.safetensors", dir.file("adapter_model.safetensors"));
  }
};

void expect_refused(const std::function<void(json&)>& edit, std::initializer_list<std::string> fragments) {
  EditedAdapter adapter(edit);
  auto model = models::load_hf_llama<float>(kFixture);
  const auto before = model->state_dict();
  expect_error<FormatError>([&] { models::load_peft_adapter(*model, adapter.dir.path()); }, fragments);
  EXPECT_TRUE(nn::lora_layers(*model).empty());  // nothing injected, nothing frozen
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.requires_grad());
  expect_same_state_dict(before, model->state_dict());
}

TEST(Peft, UnimplementedOptionsAreRefusedByName) {
  expect_refused([](json& c) { c["use_dora"] = true; }, {"adapter_config.json", "use_dora", "true"});
  expect_refused([](json& c) { c["bias"] = "all"; }, {"bias", "\"none\"", "\"all\""});
  expect_refused([](json& c) { c["fan_in_fan_out"] = true; }, {"fan_in_fan_out"});
  expect_refused([](json& c) { c["rank_pattern"] = {{"q_proj", 8}}; }, {"rank_pattern"});
  expect_refused([](json& c) { c["modules_to_save"] = {"lm_head"}; }, {"modules_to_save"});
  expect_refused([](json& c) { c["peft_type"] = "IA3"; }, {"peft_type", "LORA"});
  expect_refused([](json& c) { c["target_modules"] = ".*proj"; }, {"target_modules", "regex"});
  expect_refused([](json& c) { c["r"] = 0; }, {"r", "0"});
  expect_refused([](json& c) { c.erase("r"); }, {"r"});
}

TEST(Peft, TargetsAndTensorsThatDoNotFitAreRefused) {
  expect_refused([](json& c) { c["target_modules"] = {"q_proj", "qkv_proj"}; }, {"qkv_proj", "matches no Linear"});
  expect_refused([](json& c) { c["r"] = 8; },
                 {"adapter_model.safetensors", "q_proj.lora_A.weight", "(8, 64)", "(4, 64)"});
  expect_refused([](json& c) { c["target_modules"] = {"q_proj"}; }, {"unexpected tensor", "v_proj.lora_A.weight"});
  expect_refused(
      [](json& c) {
        c["target_modules"] = {"q_proj", "v_proj", "k_proj"};
      },
      {"missing tensor", "k_proj.lora_A.weight"});
}

TEST(Peft, MalformedWeightsAreAnErrorNotACrash) {
  const std::string bytes = read_bytes(kAdapter + "/adapter_model.safetensors");
  for (const std::size_t cut : {std::size_t(0), std::size_t(7), std::size_t(100), bytes.size() - 1}) {
    EditedAdapter adapter([](json&) {});
    write_bytes(adapter.dir.file("adapter_model.safetensors"), bytes.substr(0, cut));
    auto model = models::load_hf_llama<float>(kFixture);
    EXPECT_THROW(models::load_peft_adapter(*model, adapter.dir.path()), std::runtime_error) << cut;
    EXPECT_TRUE(nn::lora_layers(*model).empty());
  }
  TempDir empty;
  expect_error<std::runtime_error>(
      [&] { models::load_peft_adapter(*models::load_hf_llama<float>(kFixture), empty.path()); },
      {"adapter_config.json", "does not exist"});
}

TEST(Peft, AFailedSaveLeavesThePreviousAdapter) {
  auto model = with_adapter<float>();
  TempDir dir;
  fs::create_directory(dir.file("adapter_model.safetensors"));  // not a regular file: refused before writing
  EXPECT_THROW(models::save_peft_adapter(*model, models::read_peft_config(kAdapter), dir.path(), "x"),
               std::runtime_error);
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"adapter_model.safetensors"}));
}

}  // namespace
