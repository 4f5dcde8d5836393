// libFuzzer target for the cereal loaders: every input is read as a binary and as a JSON
// checkpoint and state dict. A malformed input must throw xgrad::FormatError; anything else
// escaping (another exception, a crash, a sanitizer report, a leak, a hang) is a finding. An
// input that loads must restore into freshly built objects or be refused with
// std::invalid_argument, and survive a save and a reload unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <xgrad/nn/linear.hpp>
#include <xgrad/optim/adam.hpp>
#include <xgrad/optim/lr_scheduler.hpp>
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (ArchiveFormat format : {ArchiveFormat::binary, ArchiveFormat::json}) {
    checkpoint(data, size, format);
    state_dict<float>(data, size, format);
    state_dict<double>(data, size, format);
  }
  return 0;
}
