// The folder fuzz_hf_gpt2 loads, shared with fuzz_seeds (which checks its hostile seeds the same way).
//
// An input is a config.json and, after its first NUL byte, a model.safetensors.index.json. The
// folder also holds a tiny valid GPT-2 (vocab 8, n_positions 4, n_embd 4, 1 layer, 2 heads,
// gelu_new) as model-00001-of-00001.safetensors, and as model.safetensors when the input has no
// index; tiny_config() is its config.json.
#pragma once

#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>

#include <xgrad/models/hf_gpt2.hpp>

namespace xgrad_fuzz {

inline void write_file(const std::filesystem::path& path, const char* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(size));
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class HFGPT2Folder {
 public:
  HFGPT2Folder() {
    char name[] = "/tmp/xgrad-fuzz-hf-gpt2-XXXXXX";
    if (::mkdtemp(name) == nullptr) throw std::runtime_error("HFGPT2Folder: mkdtemp failed");
    dir_ = name;
    xgrad::models::GPTConfig c;
    c.vocab_size = 8;
    c.block_size = 4;
    c.n_embd = 4;
    c.n_layer = 1;
    c.n_head = 2;
    c.activation = "gelu_tanh";
    xgrad::Generator generator(1);
    xgrad::models::GPT<float> model(c, &generator);
    xgrad::models::save_hf_gpt2(model, dir_.string());
    config_ = read_file(dir_ / "config.json");
    weights_ = read_file(dir_ / "model.safetensors");
    write_file(dir_ / "model-00001-of-00001.safetensors", weights_.data(), weights_.size());
  }
  ~HFGPT2Folder() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  HFGPT2Folder(const HFGPT2Folder&) = delete;
  HFGPT2Folder& operator=(const HFGPT2Folder&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& tiny_config() const { return config_; }

  // Writes the input's config.json (and index) into the folder.
  void write(const std::uint8_t* data, std::size_t size) {
    const char* bytes = reinterpret_cast<const char*>(data);
    const std::string input(bytes, size);
    const std::size_t nul = input.find('\0');
    write_file(dir_ / "config.json", bytes, nul == std::string::npos ? size : nul);
    std::error_code ec;
    if (nul == std::string::npos) {
      std::filesystem::remove(dir_ / "model.safetensors.index.json", ec);
      if (!std::filesystem::exists(dir_ / "model.safetensors"))
        write_file(dir_ / "model.safetensors", weights_.data(), weights_.size());
    } else {
      std::filesystem::remove(dir_ / "model.safetensors", ec);
      write_file(dir_ / "model.safetensors.index.json", bytes + nul + 1, size - nul - 1);
    }
  }

  // Loads the folder: the model, or null when load_hf_gpt2 refuses it with a std::runtime_error
  // (xgrad::FormatError for bad content); any other exception escapes.
  std::shared_ptr<xgrad::models::GPT<float>> load() const {
    try {
      return xgrad::models::load_hf_gpt2<float>(dir_.string());
    } catch (const std::runtime_error&) {
      return nullptr;
    }
  }

 private:
  std::filesystem::path dir_;
  std::string config_, weights_;
};

}  // namespace xgrad_fuzz
