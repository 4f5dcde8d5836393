// libFuzzer target for the safetensors loader. A malformed input must throw xgrad::FormatError;
// anything else escaping (another exception, a crash, a sanitizer report, a hang) is a finding.
// An input that loads must survive a save and a reload unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <xgrad/serialize/safetensors.hpp>

namespace {

template <class T>
bool same_bits(const xgrad::NamedArrays<T>& a, const xgrad::NamedArrays<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].second.shape() != b[i].second.shape()) return false;
    if (a[i].second.size() != 0 &&
        std::memcmp(a[i].second.data(), b[i].second.data(), a[i].second.size() * sizeof(T)) != 0)
      return false;
  }
  return true;
}

template <class T>
void load_and_round_trip(const std::uint8_t* data, std::size_t size) {
  xgrad::SafetensorsMetadata metadata;
  xgrad::NamedArrays<T> tensors;
  try {
    tensors = xgrad::load_safetensors_from_memory<T>(data, size, &metadata);
  } catch (const xgrad::FormatError&) {
    return;
  }
  const std::string bytes = xgrad::safetensors_bytes(tensors, metadata);
  xgrad::SafetensorsMetadata metadata_again;
  const auto again = xgrad::load_safetensors_from_memory<T>(bytes.data(), bytes.size(), &metadata_again);
  if (!same_bits(tensors, again) || metadata != metadata_again) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  load_and_round_trip<float>(data, size);
  load_and_round_trip<double>(data, size);
  return 0;
}
