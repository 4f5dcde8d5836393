// libFuzzer target for the cereal loaders: every input is read as a binary and as a JSON
// checkpoint and state dict. A malformed input must throw xgrad::FormatError; anything else
// escaping (another exception, a crash, a sanitizer report, a leak, a hang) is a finding. An
// input that loads must restore into freshly built objects or be refused with
// std::invalid_argument, and survive a save and a reload unchanged. Each input is also read with
// its checksum recomputed (the last 4 bytes of a binary file, a JSON header's crc32), as a forger
// would: otherwise nearly every mutation would stop at the checksum and the parsers behind it
// would go unexplored.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include <xgrad/nn/linear.hpp>
#include <xgrad/optim/adam.hpp>
#include <xgrad/optim/lr_scheduler.hpp>
#include <xgrad/serialize/archive_io.hpp>
#include <xgrad/serialize/serialize.hpp>

namespace {

using xgrad::ArchiveFormat;

// The objects of fuzz_seeds' checkpoints: Linear(3, 2), Adam with a group per parameter,
// LinearLR.
void restore_into_fresh_objects(const xgrad::Checkpoint<float>& c) {
  xgrad::nn::Linear<float> model(3, 2);
  xgrad::optim::Adam<float> opt(std::vector<xgrad::optim::ParamGroup<float>>{
      xgrad::optim::ParamGroup<float>({model.weight}), xgrad::optim::ParamGroup<float>({model.bias})});
  xgrad::optim::LinearLR<float> schedule(opt);
  xgrad::Generator generator;
  try {
    c.restore(model, opt, c.scheduler ? &schedule : nullptr, generator);
  } catch (const std::invalid_argument&) {
  }
}

void checkpoint(const std::uint8_t* data, std::size_t size, ArchiveFormat format) {
  xgrad::Checkpoint<float> c;
  try {
    c = xgrad::load_checkpoint_from_memory<float>(data, size, format);
  } catch (const xgrad::FormatError&) {
    return;
  }
  restore_into_fresh_objects(c);
  std::string bytes;
  try {
    bytes = xgrad::checkpoint_bytes(c, format);
  } catch (const std::invalid_argument&) {
    return;  // JSON cannot hold everything its parser accepts (a learning rate of Infinity)
  }
  const auto again = xgrad::load_checkpoint_from_memory<float>(bytes.data(), bytes.size(), format);
  if (xgrad::checkpoint_bytes(again, format) != bytes) std::abort();
}

template <class T>
void state_dict(const std::uint8_t* data, std::size_t size, ArchiveFormat format) {
  xgrad::nn::StateDict<T> s;
  try {
    s = xgrad::load_state_dict_from_memory<T>(data, size, format);
  } catch (const xgrad::FormatError&) {
    return;
  }
  const std::string bytes = xgrad::state_dict_bytes(s, ArchiveFormat::binary);
  const auto again = xgrad::load_state_dict_from_memory<T>(bytes.data(), bytes.size(), ArchiveFormat::binary);
  if (xgrad::state_dict_bytes(again, ArchiveFormat::binary) != bytes) std::abort();
}

// The input with a valid checksum for `format`, or empty when it has no place for one.
std::string resealed(const std::uint8_t* data, std::size_t size, ArchiveFormat format) {
  namespace io = xgrad::archive_io;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (format == ArchiveFormat::binary) {
    if (size < 5) return {};
    bytes.resize(size - 4);
    io::append_binary_crc(bytes);
    return bytes;
  }
  const std::string key = "\"crc32\": \"";
  const std::size_t at = bytes.find(key);
  if (at == std::string::npos || at + key.size() + 8 > bytes.size()) return {};
  bytes.replace(at + key.size(), 8, io::kJsonCrcPlaceholder);
  return io::json_with_crc(std::move(bytes));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (ArchiveFormat format : {ArchiveFormat::binary, ArchiveFormat::json}) {
    const std::string sealed = resealed(data, size, format);
    for (const auto& [d, n] : {std::pair{data, size}, std::pair{reinterpret_cast<const std::uint8_t*>(sealed.data()),
                                                                sealed.size()}}) {
      if (n == 0 && d != data) continue;
      checkpoint(d, n, format);
      state_dict<float>(d, n, format);
      state_dict<double>(d, n, format);
    }
  }
  return 0;
}
