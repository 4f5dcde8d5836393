// The input of fuzz_trainer_metadata (shared with fuzz_seeds): a checkpoint's step (the first 8
// bytes, little-endian; 0 when shorter) and metadata (the rest: "key=value" lines), saved as a
// real checkpoint and resumed by a Trainer with settings of each kind.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include <xgrad/nn/linear.hpp>
#include <xgrad/optim/sgd.hpp>
#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/train/trainer.hpp>

namespace xgrad_fuzz {

// "key=value" lines -> metadata (a line without '=' is a key with an empty value).
inline std::map<std::string, std::string> metadata_of(std::string_view text) {
  std::map<std::string, std::string> m;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, end);
    const std::size_t eq = std::min(line.find('='), line.size());
    m[std::string(line.substr(0, eq))] = std::string(line.substr(std::min(eq + 1, line.size())));
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  return m;
}

// The checkpoint bytes of an input.
inline std::string trainer_checkpoint(const std::uint8_t* data, std::size_t size) {
  std::int64_t step = 0;
  std::size_t at = 0;
  if (size >= 8) {
    for (int i = 0; i < 8; ++i) step |= static_cast<std::int64_t>(static_cast<std::uint64_t>(data[i]) << (8 * i));
    at = 8;
  }
  static xgrad::nn::Linear<float> model(2, 2);
  static xgrad::optim::SGD<float> sgd(model.parameters(), xgrad::optim::SGDOptions(0.1));
  const auto metadata = metadata_of(std::string_view(reinterpret_cast<const char*>(data) + at, size - at));
  const auto c = xgrad::Checkpoint<float>::capture(model, sgd, nullptr, xgrad::Generator(1), step, metadata);
  return xgrad::checkpoint_bytes(c, xgrad::ArchiveFormat::binary);
}

// An input's step and metadata lines.
inline std::string trainer_input(std::int64_t step, const std::string& lines) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((static_cast<std::uint64_t>(step) >> (8 * i)) & 0xFF);
  return s + lines;
}

// The metadata of a Trainer's checkpoint for the settings resume() declares.
inline std::string good_trainer_metadata() {
  return "config.lr=0x1.999999999999ap-4\nconfig.width=8\nconfig.seed=18446744073709551615\nconfig.tokens=-3\n"
         "config.name=run\nconfig.bf16=1\nloss_sum=0x1.8p+1\nloss_count=2\naccuracy=nan\nelapsed=0x1p+0\n"
         "max_steps=10\nplanned_steps=10";
}

// A Trainer resuming from the checkpoint at `path` (settings of each kind); aborts when it resumes
// in a state no run can be in. Throws what the Trainer throws.
inline void resume_trainer(const std::string& path) {
  double lr = 0;
  int width = 0;
  std::uint64_t seed = 0;
  std::int64_t tokens = 0;
  std::string name;
  bool bf16 = false;
  xgrad::train::Settings settings;
  settings.add("lr", lr);
  settings.add("width", width);
  settings.add("seed", seed);
  settings.add("tokens", tokens);
  settings.add("name", name);
  settings.add_flag("bf16", bf16);
  xgrad::train::TrainerOptions o;
  o.ckpt_path = path;
  o.enable_checkpointing = false;
  o.enable_progress_bar = false;
  const xgrad::train::Trainer trainer("fuzz", o, settings);
  if (trainer.first_step() < 0 || trainer.first_step() > trainer.max_steps() || trainer.planned_steps() < 0)
    std::abort();
}

}  // namespace xgrad_fuzz
