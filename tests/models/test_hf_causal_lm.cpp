// load_hf_causal_lm: config.json's model_type picks the family (gpt2 -> GPT, llama / qwen2 /
// mistral -> LlamaForCausalLM), the model's logits are its family loader's, save_hf_causal_lm
// writes the folder back, and an unknown model_type is refused naming the file, the key and the
// supported values.
#include "serialize_util.hpp"

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/models/hf_causal_lm.hpp>
#include <xgrad/models/hf_gpt2.hpp>
#include <xgrad/models/hf_llama.hpp>

using namespace xgrad;
using namespace xgrad::testing;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) { return std::string(XGRAD_FIXTURES_DIR) + "/" + name; }

IndexArray some_ids(std::int64_t vocab) {
  IndexArray ids = empty_array<std::int64_t>(Shape{1, 5});
  for (std::size_t i = 0; i < ids.size(); ++i) ids.data()[i] = static_cast<std::int64_t>((7 * i + 3) % vocab);
  return ids;
}

// The same logits, bit for bit.
template <class A, class B>
void expect_same_logits(A& a, B& b, std::int64_t vocab) {
  NoGradGuard no_grad;
  const IndexArray ids = some_ids(vocab);
  EXPECT_TRUE(a.forward(ids).value() == b.forward(ids).value());
}

}  // namespace

TEST(HFCausalLM, TheModelTypePicksTheFamily) {
  const std::pair<std::string, std::string> folders[] = {
      {"hf-gpt2-tiny", "gpt2"}, {"hf-llama-tiny", "llama"}, {"hf-qwen2-tiny", "qwen2"}, {"hf-mistral-tiny", "mistral"}};
  for (const auto& [name, type] : folders) {
    SCOPED_TRACE(name);
    EXPECT_EQ(models::read_hf_model_type(fixture(name)), type);
    auto lm = models::load_hf_causal_lm<float>(fixture(name));
    lm.module().eval();
    EXPECT_EQ(lm.model_type, type);
    if (type == "gpt2") {
      ASSERT_NE(lm.as<models::GPT<float>>(), nullptr);
      EXPECT_EQ(lm.as<models::LlamaForCausalLM<float>>(), nullptr);
      auto direct = models::load_hf_gpt2<float>(fixture(name));
      direct->eval();
      expect_same_logits(lm, *direct, 64);
    } else {
      ASSERT_NE(lm.as<models::LlamaForCausalLM<float>>(), nullptr);
      EXPECT_EQ(lm.as<models::LlamaForCausalLM<float>>()->config().model_type, type);
      auto direct = models::load_hf_llama<float>(fixture(name));
      direct->eval();
      expect_same_logits(lm, *direct, 64);
    }
  }
}

TEST(HFCausalLM, SavesWithItsFamilysWriter) {
  for (const char* name : {"hf-gpt2-tiny", "hf-qwen2-tiny"}) {
    auto lm = models::load_hf_causal_lm<float>(fixture(name));
    TempDir out;
    models::save_hf_causal_lm(lm, out.path());
    auto again = models::load_hf_causal_lm<float>(out.path());
    EXPECT_EQ(again.model_type, lm.model_type);
    const auto a = lm.module().state_dict(), b = again.module().state_dict();
    for (const auto& [key, value] : a) EXPECT_TRUE(value == b.at(key)) << name << " " << key;
  }
}

TEST(HFCausalLM, AnUnknownModelTypeIsRefusedNamingTheFileTheKeyAndTheSupportedValues) {
  TempDir dir;
  json config = json::parse(read_bytes(fixture("hf-llama-tiny") + "/config.json"));
  config["model_type"] = "gemma";
  write_bytes(dir.file("config.json"), config.dump(2));
  fs::copy_file(fixture("hf-llama-tiny") + "/model.safetensors", dir.file("model.safetensors"));
  try {
    models::load_hf_causal_lm<float>(dir.path());
    ADD_FAILURE() << "expected a refusal";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    for (const char* part :
         {"config.json", "model_type", "\"gemma\"", "\"gpt2\"", "\"llama\"", "\"qwen2\"", "\"mistral\""})
      EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  }
  config.erase("model_type");
  write_bytes(dir.file("config.json"), config.dump(2));
  EXPECT_THROW(models::load_hf_causal_lm<float>(dir.path()), FormatError);
}
