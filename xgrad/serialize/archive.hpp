// cereal archives of training state: a module's state dict, an optimizer's state, a learning-rate
// schedule's state and a generator's state (checkpoint.hpp bundles them). torch.save and
// torch.load for xgrad, with PyTorch's names where it has them:
//
//   xgrad::save(*model, "model.xgrad");                  // parameters and buffers by name
//   xgrad::load(*model, "model.xgrad");                  // through model->load_state_dict
//   const auto names = xgrad::parameter_names(optimizer, *model);
//   xgrad::save(optimizer, "adam.xgrad", names);         // per-parameter state by name, options
//   xgrad::load(optimizer, "adam.xgrad", names);
//   xgrad::save(scheduler, "schedule.json");             // JSON: the path ends in ".json"
//
// Formats: cereal's portable binary archive (little-endian) by default, cereal's JSON archive
// when the path ends in ".json". Every file starts with a header {magic "xgrad", format version,
// kind of content}; every archived type carries a cereal class version. A binary file is
// byte 0x01 (cereal's endianness flag), the header, the content. JSON files are
// {"header": {...}, "<kind>": {...}}; tensors are {"dtype", "shape", "data", "non_finite"}, where
// data holds 0 in place of each NaN or infinity and non_finite lists them as [index, "nan" |
// "inf" | "-inf"] (JSON has no such numbers). Binary files keep every bit; JSON keeps every value
// exactly (shortest round-trip decimals) but not NaN payloads. Other non-finite numbers (a
// learning rate of inf) cannot be written to JSON, nor strings that are not valid UTF-8 or hold
// a NUL: saving them throws.
//
// Loading checks everything against the bytes that remain before allocating anything (every
// length, every shape, overflow-checked), and throws xgrad::FormatError naming the file and what
// is wrong for a truncated, corrupt, foreign or newer file; std::runtime_error when the file
// cannot be read. Saving goes through write_file_atomically: a failed save leaves the previous
// file intact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/base/random.hpp>
#include <xgrad/nn/module.hpp>
#include <xgrad/optim/lr_scheduler.hpp>
#include <xgrad/optim/optimizer.hpp>
#include <xgrad/serialize/format_error.hpp>

namespace xgrad {

enum class ArchiveFormat { binary, json };

// json when the path ends in ".json", binary otherwise.
ArchiveFormat archive_format(const std::string& path);

constexpr const char* kArchiveMagic = "xgrad";
// The format this build writes and the newest it reads. 1 is the first; 2 adds a CRC-32 over
// every byte (a binary file ends with it, a JSON file's header holds it), verified on load, so a
// flipped bit or a truncation is refused instead of loading other values. Later builds read every
// earlier version (tests/fixtures/serialize_v1/ and serialize_v2/, format 1, are the contract).
// Within a format, each archived type has a class version: the optimizer state's is 2 since it
// holds any optimizer (tests/fixtures/serialize_v3/, format 2, pin what this build writes).
constexpr std::uint32_t kArchiveFormatVersion = 2;

// ---- module state ------------------------------------------------------------------------------

template <class T>
void save(const nn::StateDict<T>& state, const std::string& path);
// Saves module.state_dict().
template <class T>
void save(const nn::Module<T>& module, const std::string& path);

// A float32 file loads into double exactly; a float64 file into float rounds to nearest.
template <class T = float>
nn::StateDict<T> load_state_dict(const std::string& path);
// module.load_state_dict(load_state_dict(path), strict): a mismatch throws one
// std::invalid_argument naming the file and listing every missing, unexpected and mis-shaped key.
template <class T>
nn::LoadStateDictResult load(nn::Module<T>& module, const std::string& path, bool strict = true);

// The same in memory; `name` stands for the file in error messages.
template <class T>
void write_state_dict(std::ostream& out, const nn::StateDict<T>& state, ArchiveFormat format);
template <class T>
std::string state_dict_bytes(const nn::StateDict<T>& state, ArchiveFormat format);
template <class T = float>
nn::StateDict<T> load_state_dict_from_memory(const void* data, std::size_t size, ArchiveFormat format,
                                             const std::string& name = "<memory>");

// ---- optimizer state -----------------------------------------------------------------------------

// An optimizer's state keyed by parameter name (torch's optimizer.state_dict(), with names where
// torch has indices): the options of each group and every parameter's state. Written and read the
// same way for every optimizer: options as named values (OptimizerOptions::values()), each
// parameter's state as a step count and named arrays.
template <class T = float>
struct OptimizerState {
  struct Group {
    // Captured: the optimizer's own options (AdamOptions, ...); loaded from a file:
    // optim::SavedOptions, the named values, which load_optimizer_state_dict turns into the
    // optimizer's own options (options->get<double>("lr") reads either).
    std::shared_ptr<const optim::OptimizerOptions> options;
    std::optional<double> initial_lr;  // set by the first schedule
    std::vector<std::string> params;   // its parameters' names, in order
  };
  std::string optimizer;  // optimizer.name(): "SGD", "Adam", "AdamW", "RMSprop", ...
  std::vector<Group> param_groups;
  // The parameters that have state (momentum buffers, moments, step counts), by name.
  std::vector<std::pair<std::string, optim::ParamState<T>>> state;
};

// The name of each of optimizer.parameters() in module.named_parameters(); throws
// std::invalid_argument if one is not a parameter of the module.
template <class T>
std::vector<std::string> parameter_names(const optim::Optimizer<T>& optimizer, const nn::Module<T>& module);

// `names` names optimizer.parameters(), one each, all different.
template <class T>
OptimizerState<T> optimizer_state_dict(const optim::Optimizer<T>& optimizer, const std::vector<std::string>& names);
// Restores options (lr included), initial_lr and per-parameter state. The optimizer must be of the
// same kind, with the same option names, the same groups of the same parameters (by name, in any
// order within a group) and state arrays it declares of the same shapes; otherwise throws
// std::invalid_argument saying what differs and changes nothing.
template <class T>
void load_optimizer_state_dict(optim::Optimizer<T>& optimizer, const OptimizerState<T>& state,
                               const std::vector<std::string>& names);

template <class T>
void save(const OptimizerState<T>& state, const std::string& path);
template <class T>
void save(const optim::Optimizer<T>& optimizer, const std::string& path, const std::vector<std::string>& names);
template <class T = float>
OptimizerState<T> load_optimizer_state(const std::string& path);
template <class T>
void load(optim::Optimizer<T>& optimizer, const std::string& path, const std::vector<std::string>& names);

// ---- learning-rate schedule and generator ------------------------------------------------------

void save(const optim::LRSchedulerState& state, const std::string& path);
template <class T>
void save(const optim::LRScheduler<T>& scheduler, const std::string& path);
optim::LRSchedulerState load_lr_scheduler_state(const std::string& path);
// scheduler.load_state(...): the optimizer's lrs are part of the optimizer's own state.
template <class T>
void load(optim::LRScheduler<T>& scheduler, const std::string& path);

void save(const Generator& generator, const std::string& path);
void load(Generator& generator, const std::string& path);

}  // namespace xgrad
