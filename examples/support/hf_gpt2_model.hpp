// The model of a Hugging Face GPT-2 folder for the example programs, with every failure a
// xgrad::train::Refused line naming --hf.
#pragma once

#include <filesystem>
#include <string>

#include <xgrad/models/hf_gpt2.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

namespace hf_gpt2_model {

// dir/config.json, checked; a folder without it is refused naming --hf.
inline xgrad::models::GPTConfig config(const std::string& dir) {
  if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json"))
    throw xgrad::train::Refused("--hf " + dir + ": no config.json there: expected a Hugging Face GPT-2 folder");
  try {
    return xgrad::models::load_hf_gpt2_config(dir);
  } catch (const std::exception& e) {
    throw xgrad::train::Refused("--hf " + dir + ": " + e.what());
  }
}

// dir's weights into `model` (built from config(dir)).
inline void load_weights(xgrad::models::GPT<float>& model, const std::string& dir) {
  try {
    xgrad::models::load_hf_gpt2_weights(model, dir);
  } catch (const std::exception& e) {
    throw xgrad::train::Refused("--hf " + dir + ": " + e.what());
  }
}

}  // namespace hf_gpt2_model
