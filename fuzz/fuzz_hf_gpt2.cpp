// libFuzzer target for load_hf_gpt2: the input is a folder's config.json and, after its first NUL
// byte, its model.safetensors.index.json, beside a tiny valid GPT-2's weights (hf_gpt2_folder.hpp).
// A folder that does not load must throw std::runtime_error (xgrad::FormatError for bad content, a
// std::runtime_error for a file the index names that cannot be read); anything else escaping (a
// std::invalid_argument from the model's own checks, a bad_alloc, a crash, a sanitizer report, a
// hang) is a finding. A folder that loads must survive save_hf_gpt2 and a reload unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "hf_gpt2_folder.hpp"

namespace {

bool same_state(const xgrad::models::GPT<float>& a, const xgrad::models::GPT<float>& b) {
  const auto sa = a.state_dict(), sb = b.state_dict();
  if (sa.keys() != sb.keys()) return false;
  for (const auto& [name, value] : sa) {
    const auto& other = sb.at(name);
    if (value.shape() != other.shape() ||
        (value.size() != 0 && std::memcmp(value.data(), other.data(), value.size() * sizeof(float)) != 0))
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static xgrad_fuzz::HFGPT2Folder folder, saved;
  folder.write(data, size);
  const auto model = folder.load();
  if (model == nullptr) return 0;
  xgrad::models::save_hf_gpt2(*model, saved.dir().string());
  const auto again = xgrad::models::load_hf_gpt2<float>(saved.dir().string());
  const auto& c = model->config();
  const auto& d = again->config();
  if (!same_state(*model, *again) || c.vocab_size != d.vocab_size || c.block_size != d.block_size ||
      c.n_layer != d.n_layer || c.n_head != d.n_head || c.n_embd != d.n_embd || c.activation != d.activation ||
      c.layer_norm_eps != d.layer_norm_eps || c.dropout != d.dropout ||
      (c.n_inner > 0 ? c.n_inner : 4 * c.n_embd) != (d.n_inner > 0 ? d.n_inner : 4 * d.n_embd))
    std::abort();
  return 0;
}
