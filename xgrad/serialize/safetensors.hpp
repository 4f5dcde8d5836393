// safetensors: the tensor file format PyTorch users exchange weights in
// (https://github.com/huggingface/safetensors). xgrad reads and writes it so that a state dict
// moves between PyTorch and xgrad unchanged.
//
//   auto weights = xgrad::load_safetensors<float>("model.safetensors");   // name -> array
//   xgrad::save_safetensors(weights, "copy.safetensors", {{"format", "pt"}});
//   xgrad::save_safetensors(encoder, "encoder.safetensors");               // a module's state_dict
//   encoder.load_state_dict(xgrad::load_safetensors_state_dict<float>("encoder.safetensors"));
//
// Layout: an 8-byte little-endian u64 N, N bytes of UTF-8 JSON
//   {"__metadata__": {"key": "value"}, "name": {"dtype": "F32", "shape": [2, 3],
//    "data_offsets": [begin, end]}, ...}
// then the data buffer: each tensor's elements row-major, little-endian, at [begin, end) of the
// buffer. Loading accepts only a well-formed file: the header at most 100,000,000 bytes, starting
// with '{', valid UTF-8 and JSON without duplicate keys; every entry an object with a known
// dtype, a shape of non-negative integers and integer offsets with
// end - begin == prod(shape) * itemsize (overflow-checked); the tensors tiling the buffer from 0
// to its last byte without overlaps or gaps; metadata values strings. Anything else throws
// xgrad::FormatError naming the file and what is wrong, before any tensor is allocated.
//
// dtypes: F32 and F64 load as they are (F64 into float rounds to nearest, out-of-range values
// becoming +-inf; F32 into double is exact); F16 and BF16 are converted exactly (subnormals,
// infinities and NaN included). The other dtypes of the format (BOOL, U8, I8, F8_E5M2, F8_E4M3,
// I16, U16, I32, U32, I64, U64) are recognised in the header, which read_safetensors_header
// reports, but loading one as floating point throws FormatError (load_safetensors_if leaves such a
// tensor unread when it is not selected). Saving writes F32 for float and F64 for double
// (write_safetensors: or BF16, F16, F32 or F64 per tensor), the header padded with spaces to a
// multiple of 8 bytes (as the reference implementation does) and the tensors laid out
// contiguously in the given order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/core/tensor.hpp>
#include <xgrad/nn/module.hpp>
#include <xgrad/serialize/format_error.hpp>

namespace xgrad {

// Name -> array in a fixed order (PyTorch's state_dict is an OrderedDict too).
template <class T>
using NamedArrays = std::vector<std::pair<std::string, Array<T>>>;

using SafetensorsMetadata = std::map<std::string, std::string>;

// The reference implementation's limit on N.
constexpr std::uint64_t kSafetensorsMaxHeaderSize = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as written in the file: "F32", "BF16", "I64", ...
  Shape shape;
  std::uint64_t begin = 0;  // byte offsets into the data buffer, [begin, end)
  std::uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in the order of the header
  SafetensorsMetadata metadata;
  std::uint64_t header_size = 0;  // N, the bytes of JSON (and padding)
  std::uint64_t data_size = 0;    // the bytes of the data buffer after it
};

// Reads and fully validates a file's header without loading any tensor (for inspection).
// Throws std::runtime_error if the file cannot be read, FormatError if it is malformed.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Loads every tensor, in the order of the header; the file's metadata goes to `metadata` when
// given. Throws std::runtime_error if the file cannot be read, FormatError if it is malformed
// or holds a tensor of a dtype other than F16, BF16, F32, F64.
template <class T = float>
NamedArrays<T> load_safetensors(const std::string& path, SafetensorsMetadata* metadata = nullptr);

// Selects tensors by name.
using SafetensorsFilter = std::function<bool(const std::string&)>;

// Loads only the tensors whose names `keep` accepts, in the order of the header: the others are
// neither read nor converted, whatever their dtype (a BOOL attention mask beside float weights).
// The header is validated whole, as by load_safetensors.
template <class T = float>
NamedArrays<T> load_safetensors_if(const std::string& path, const SafetensorsFilter& keep,
                                   SafetensorsMetadata* metadata = nullptr);

// The same from bytes in memory; `name` stands for the file in error messages.
template <class T = float>
NamedArrays<T> load_safetensors_from_memory(const void* data, std::size_t size,
                                            SafetensorsMetadata* metadata = nullptr,
                                            const std::string& name = "<memory>");

// The dtype a tensor is written as, by name: "F32", "F64", "BF16" or "F16".
using SafetensorsDtypes = std::map<std::string, std::string>;

// Writes the file format to a stream, each tensor as T's dtype (F32, F64) or as `dtypes` says:
// rounded to nearest, ties to even, as torch's .to(dtype) (a double goes through float for BF16
// and F16, as in torch; past the dtype's range +-inf). Throws std::invalid_argument (before
// writing anything) if two tensors share a name, a name is "__metadata__", a name or metadata
// string is not valid UTF-8, or `dtypes` names another dtype.
template <class T>
void write_safetensors(std::ostream& out, const NamedArrays<T>& tensors, const SafetensorsMetadata& metadata = {},
                       const SafetensorsDtypes& dtypes = {});

// The file's bytes, as write_safetensors writes them.
template <class T>
std::string safetensors_bytes(const NamedArrays<T>& tensors, const SafetensorsMetadata& metadata = {},
                              const SafetensorsDtypes& dtypes = {});

// Saves with write_file_atomically: a failed save leaves any previous file at `path` intact.
template <class T>
void save_safetensors(const NamedArrays<T>& tensors, const std::string& path,
                      const SafetensorsMetadata& metadata = {});

// ---- modules: a state_dict to and from a file --------------------------------------------------

template <class T>
void save_safetensors(const nn::StateDict<T>& state, const std::string& path,
                      const SafetensorsMetadata& metadata = {}) {
  save_safetensors(state.items(), path, metadata);
}

// Saves module.state_dict(): parameters and buffers under PyTorch's keys.
template <class T>
void save_safetensors(const nn::Module<T>& module, const std::string& path,
                      const SafetensorsMetadata& metadata = {}) {
  save_safetensors(module.state_dict(), path, metadata);
}

// The file as a state dict for Module::load_state_dict.
template <class T = float>
nn::StateDict<T> load_safetensors_state_dict(const std::string& path,
                                             SafetensorsMetadata* metadata = nullptr) {
  nn::StateDict<T> state;
  for (auto& [name, array] : load_safetensors<T>(path, metadata))
    state.insert(std::move(name), std::move(array));
  return state;
}

}  // namespace xgrad
