// libFuzzer target for the metadata the Trainer resumes from (xgrad/train/trainer.cpp): every input
// is a checkpoint's step and metadata (fuzz/trainer_metadata.hpp), saved as a real checkpoint and
// resumed by a Trainer with settings of each kind. The Trainer must resume (at a step in
// [0, max_steps], max_steps and planned_steps not negative) or refuse with a std::runtime_error
// (train::Refused, FormatError); anything else escaping (a std::invalid_argument or
// std::out_of_range of a number conversion, a crash, a sanitizer report, a leak, a hang) is a
// finding.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "memory_file.hpp"
#include "trainer_metadata.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes = xgrad_fuzz::trainer_checkpoint(data, size);
  static xgrad_fuzz::MemoryFile memory;
  memory.write(bytes.data(), bytes.size());
  try {
    xgrad_fuzz::resume_trainer(memory.path());
  } catch (const std::runtime_error&) {  // train::Refused, FormatError
  }
  return 0;
}
