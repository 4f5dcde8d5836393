// No library exception escapes a public loader (the input layer, docs/reliability.md "Input
// rule"): every loader is driven with hostile files -- empty, NUL bytes, deep JSON, huge numbers,
// random bytes, a valid file of its kind cut short or with bytes changed, and (plain builds) a
// 1 TiB sparse file -- and each must either load or throw an error naming the file: never a bare
// std::bad_alloc, std::length_error, an nlohmann exception, or a std::invalid_argument /
// std::out_of_range from a number conversion; never a crash on the default 8 MiB stack.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <xgrad/models/llama_config.hpp>
#include <xgrad/serialize/hf_folder.hpp>
#include <xgrad/text/tokenizer.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

#include "address_space_limit.hpp"
#include "hostile_input.hpp"

namespace {

namespace fs = std::filesystem;
using xgrad::testing::deep_json;
using xgrad::testing::escape_of;

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A loader of one kind of file: `load` reads `file` (in `dir`); `valid` writes a good one there.
struct Loader {
  std::string name, file;
  std::function<void(const std::string& dir)> valid;
  std::function<void(const std::string& dir)> load;
};

std::string at(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

xgrad::models::GPTConfig tiny_gpt() {
  xgrad::models::GPTConfig c;
  c.vocab_size = 8, c.block_size = 4, c.n_layer = 1, c.n_head = 1, c.n_embd = 4;
  return c;
}

// A small Llama's config.json, and a generation_config.json beside it.
void write_llama_config(const std::string& dir) {
  xgrad::models::LlamaConfig c;
  c.vocab_size = 8, c.hidden_size = 8, c.intermediate_size = 16, c.num_hidden_layers = 1;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 4, c.max_position_embeddings = 16;
  write(at(dir, "config.json"), c.to_json().dump(2));
  write(at(dir, "generation_config.json"), "{\"bos_token_id\": 1, \"eos_token_id\": [2, 3]}");
}

// A folder whose weights are one shard listed by model.safetensors.index.json.
void write_sharded(const std::string& dir, const xgrad::NamedArrays<float>& tensors) {
  xgrad::save_safetensors(tensors, at(dir, "model-00001-of-00001.safetensors"));
  std::string map;
  for (const auto& [name, array] : tensors)
    map += (map.empty() ? "\"" : ", \"") + name + "\": \"model-00001-of-00001.safetensors\"";
  write(at(dir, "model.safetensors.index.json"), "{\"metadata\": {}, \"weight_map\": {" + map + "}}");
}

void resume_trainer(const std::string& path) {
  double lr = 0;
  xgrad::train::Settings settings;
  settings.add("lr", lr);
  xgrad::train::TrainerOptions o;
  o.ckpt_path = path;
  o.enable_checkpointing = false;
  const xgrad::train::Trainer trainer("test", o, settings);
}

std::vector<Loader> loaders() {
  using namespace xgrad;
  const auto small_state = [] {
    NamedArrays<float> t;
    t.emplace_back("w", Array<float>{{1, 2}, {3, 4}});
    t.emplace_back("b", Array<float>{5, 6});
    return t;
  };
  const auto save_ckpt = [](const std::string& path) {
    manual_seed(0);
    nn::Linear<float> model(2, 2);
    optim::SGD<float> sgd(model.parameters(), optim::SGDOptions(0.1));
    save_checkpoint(path, model, sgd, nullptr, default_generator(), 3,
                    {{"config.lr", "0.1"},
                     {"loss_sum", "0x0p+0"},
                     {"loss_count", "0"},
                     {"accuracy", "0x0p+0"},
                     {"elapsed", "0x0p+0"},
                     {"max_steps", "10"}});
  };
  const auto save_tokenizer = [](const std::string& dir) {
    text::BPETokenizer(text::bytes_to_unicode(), {}, {}).save(dir);
  };
  return {
      {"load_safetensors", "w.safetensors",
       [&](const std::string& d) { save_safetensors(small_state(), at(d, "w.safetensors")); },
       [](const std::string& d) { load_safetensors<float>(at(d, "w.safetensors")); }},
      {"load_safetensors_state_dict", "w.safetensors",
       [&](const std::string& d) { save_safetensors(small_state(), at(d, "w.safetensors")); },
       [](const std::string& d) { load_safetensors_state_dict<float>(at(d, "w.safetensors")); }},
      {"load_checkpoint", "run.ckpt", [&](const std::string& d) { save_ckpt(at(d, "run.ckpt")); },
       [](const std::string& d) { load_checkpoint<float>(at(d, "run.ckpt")); }},
      {"Trainer resume", "run.ckpt", [&](const std::string& d) { save_ckpt(at(d, "run.ckpt")); },
       [](const std::string& d) { resume_trainer(at(d, "run.ckpt")); }},
      {"load_hf_gpt2 config.json", "config.json",
       [](const std::string& d) { models::save_hf_gpt2(models::GPT<float>(tiny_gpt()), d); },
       [](const std::string& d) { models::load_hf_gpt2<float>(d); }},
      {"load_hf_gpt2 model.safetensors", "model.safetensors",
       [](const std::string& d) { models::save_hf_gpt2(models::GPT<float>(tiny_gpt()), d); },
       [](const std::string& d) { models::load_hf_gpt2<float>(d); }},
      {"load_llama_config config.json", "config.json", write_llama_config,
       [](const std::string& d) { models::load_llama_config(d); }},
      {"load_llama_config generation_config.json", "generation_config.json", write_llama_config,
       [](const std::string& d) { models::load_llama_config(d); }},
      {"read_hf_weights model.safetensors.index.json", "model.safetensors.index.json",
       [&](const std::string& d) { write_sharded(d, small_state()); },
       [](const std::string& d) {
         load_hf_tensors<float>(read_hf_weights(d), [](const std::string&) { return true; });
       }},
      {"BPETokenizer encoder.json", "encoder.json", save_tokenizer,
       [](const std::string& d) { text::BPETokenizer::load(d); }},
      {"BPETokenizer vocab.bpe", "vocab.bpe", save_tokenizer,
       [](const std::string& d) { text::BPETokenizer::load(d); }},
      {"Tokenizer::load", "tokenizer.json",
       [](const std::string& d) { text::Tokenizer(text::CharTokenizer(U"abc")).save(at(d, "tokenizer.json")); },
       [](const std::string& d) { text::Tokenizer::load(at(d, "tokenizer.json")); }},
      {"TokenFile", "train.tok",
       [](const std::string& d) {
         data::write_token_file(at(d, "train.tok"), {1, 2, 3, 4, 5}, data::TokenFileOptions().vocab_size(8));
       },
       [](const std::string& d) { data::TokenFile file(at(d, "train.tok")); }},
      {"read_npy", "x.npy",
       [](const std::string& d) {
         // A (2, 2) float32 .npy, version 1.0.
         std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
         header.resize(118 - 1, ' ');
         header += '\n';
         std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(118) + char(0) + header;
         const float values[4] = {1, 2, 3, 4};
         bytes.append(reinterpret_cast<const char*>(values), sizeof values);
         write(at(d, "x.npy"), bytes);
       },
       [](const std::string& d) { data::read_npy<float>(at(d, "x.npy")); }},
      {"read_csv", "x.csv", [](const std::string& d) { write(at(d, "x.csv"), "1,2\n3,4\n"); },
       [](const std::string& d) { data::read_csv<float>(at(d, "x.csv")); }},
      {"read_lines", "x.txt", [](const std::string& d) { write(at(d, "x.txt"), "one\ntwo\n"); },
       [](const std::string& d) { data::read_lines(at(d, "x.txt")); }},
  };
}

// Hostile contents for a file whose valid form is `valid`.
std::vector<std::string> hostile_contents(const std::string& valid) {
  std::vector<std::string> inputs = {"",
                                     std::string(4096, '\0'),
                                     deep_json(),
                                     "{\"a\": " + deep_json(100000, true) + "}",
                                     "1e999999",
                                     "{\"n_positions\": 1e99, \"model_type\": \"gpt2\"}",
                                     "{\"model_type\": \"gpt2\", \"n_embd\": -1}",
                                     "{\"model\": [1]}",
                                     std::string("\xff\xfe\x00\x01", 4)};
  std::mt19937 rng(7);
  std::string random(4096, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  inputs.push_back(random);
  for (std::size_t i = 1; i <= 8; ++i) inputs.push_back(valid.substr(0, valid.size() * i / 9));  // cut short
  for (std::size_t i = 0; i < 24 && !valid.empty(); ++i) {                                       // bytes changed
    std::string changed = valid;
    const std::size_t at = rng() % valid.size();
    changed[at] = static_cast<char>(i % 3 == 0 ? 0xff : i % 3 == 1 ? '9' : changed[at] ^ 0x40);
    inputs.push_back(changed);
  }
  std::string big_number = valid;  // every digit run made huge
  for (std::size_t i = big_number.find_first_of("0123456789"); i != std::string::npos && i < 4096;
       i = big_number.find_first_of("0123456789", i + 30))
    big_number.insert(i, "99999999999999999999");
  inputs.push_back(big_number);
  return inputs;
}

class LoadersHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/xgrad-loaders-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(LoadersHostile, NoLibraryExceptionEscapesAnyLoader) {
  for (const Loader& loader : loaders()) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    loader.valid(dir_);
    const std::string path = at(dir_, loader.file);
    const std::string valid = read(path);
    ASSERT_FALSE(valid.empty()) << loader.name;
    ASSERT_EQ(escape_of([&] { loader.load(dir_); }), "") << loader.name << " refuses its valid file";
    std::size_t refused = 0;
    for (const std::string& input : hostile_contents(valid)) {
      write(path, input);
      const std::string message = escape_of([&] { loader.load(dir_); });
      if (message.empty()) continue;  // a changed byte that still makes a valid file
      ++refused;
      EXPECT_EQ(message.rfind("FORBIDDEN", 0), std::string::npos) << loader.name << ": " << message;
      EXPECT_NE(message.find(loader.file), std::string::npos) << loader.name << ": the file is not named: " << message;
    }
    EXPECT_GT(refused, 0u) << loader.name;
  }
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// A file larger than the memory: a bounded loader refuses it by its size, the others with an
// OutOfMemoryError naming the file (the sanitizers' allocators abort instead: plain build only).
TEST_F(LoadersHostile, AHugeFileIsRefusedNamingIt) {
  for (const Loader& loader : loaders()) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    loader.valid(dir_);
    const std::string path = at(dir_, loader.file);
    ASSERT_EQ(::truncate(path.c_str(), std::int64_t(1) << 40), 0);  // sparse: 1 TiB of nothing
    std::string message;
    {
      xgrad::testing::AddressSpaceLimit limit(std::size_t{64} << 20);
      limit.apply();
      message = escape_of([&] { loader.load(dir_); });
    }
    EXPECT_EQ(message.rfind("FORBIDDEN", 0), std::string::npos) << loader.name << ": " << message;
    EXPECT_NE(message.find(loader.file), std::string::npos) << loader.name << ": " << message;
  }
}
#endif

}  // namespace
