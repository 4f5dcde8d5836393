// The parts of a Hugging Face model folder (what save_pretrained writes) that every model family
// shares; a model file (models/hf_gpt2.cpp) adds its config keys and its name table.
//
//   const nlohmann::json config = read_hf_json("load_hf_llama", hf_file(dir, "config.json"));
//   const HFWeights w = read_hf_weights(dir, "load_hf_llama");    // every header, no tensor yet
//   expect_hf_tensor(w, "model.norm.weight", {64}, "from config.json", "load_hf_llama");
//   auto tensors = load_hf_tensors<float>(w, keep_all, "load_hf_llama");
//   write_files_together(dir, {{"config.json", ...}, {"model.safetensors", ...}}, "save_hf_llama");
//
// The weights: dir/model.safetensors, else dir/model.safetensors.index.json, whose "weight_map"
// (tensor name -> shard file name in the folder) lists the shards; model.safetensors is read first
// when both are there, as transformers does. Every header is read and checked before any tensor
// (safetensors.hpp's checks), and a sharded folder must agree with its index: each shard holds
// exactly the tensors the index places in it. F32, F16, BF16 and F64 tensors load converted to T.
//
// Errors name `who` (the function the user called) and the file: std::runtime_error for a file
// that cannot be read, xgrad::FormatError (a std::runtime_error) for bad content.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/serialize/safetensors.hpp>

namespace xgrad {

// config.json, generation_config.json and the index are a few kilobytes; a larger file is not one of them.
constexpr std::uint64_t kMaxHFJsonBytes = std::uint64_t(64) << 20;

// dir/name.
std::string hf_file(const std::string& dir, const std::string& name);

// Whether `path` exists (a link to nothing does not).
bool hf_file_exists(const std::string& path);

// A JSON file of the folder (config.json, generation_config.json, the index): a regular file of at
// most kMaxHFJsonBytes, nesting at most kMaxJsonDepth levels.
nlohmann::json read_hf_json(const char* who, const std::string& path);

// dir/config.json, which must exist (std::runtime_error naming it, "a Hugging Face model folder
// holds config.json and model.safetensors"); the model's reader checks what it holds.
nlohmann::json read_hf_config(const char* who, const std::string& dir);

// dir/generation_config.json when the folder has one (a JSON object, else FormatError).
std::optional<nlohmann::json> read_hf_generation_config(const char* who, const std::string& dir);

// ---- the weights -------------------------------------------------------------------------------

// Where a tensor is: its file and its header entry.
struct HFTensor {
  std::string file;
  SafetensorsEntry entry;
};

// A folder's safetensors files and their tensors, from the headers.
struct HFWeights {
  std::vector<std::string> files;           // in reading order
  std::map<std::string, HFTensor> tensors;  // Hugging Face name -> where
  std::string listing;                      // the file that lists the tensors: model.safetensors or the index
};

// Whether dir has model.safetensors or model.safetensors.index.json.
bool has_hf_weights(const std::string& dir);

// Finds the files and reads and checks their headers (no tensor is read). A folder with neither
// file throws std::runtime_error naming it; a shard that cannot be read is named with the index
// entry that lists it.
HFWeights read_hf_weights(const std::string& dir, const char* who = "read_hf_weights");

// Whether load_hf_tensors converts this dtype: F32, F16, BF16, F64.
bool hf_loadable_dtype(const std::string& dtype);

// The tensor `name`, checked: present (else FormatError naming the listing: "missing tensor ... (of
// shape ... <origin>)"), of `shape` and of a loadable dtype (else FormatError naming its file).
// `origin` says where the shape comes from ("from config.json").
const HFTensor& expect_hf_tensor(const HFWeights& weights, const std::string& name, const Shape& shape,
                                 const std::string& origin, const char* who = "read_hf_weights");

// Reads the tensors whose names `keep` accepts from every file, converted to T (the others are not
// read, whatever their dtype). Each must be the one the headers described (a file changed since
// read_hf_weights throws FormatError naming the tensor).
template <class T>
std::map<std::string, Array<T>> load_hf_tensors(const HFWeights& weights, const SafetensorsFilter& keep,
                                                const char* who = "read_hf_weights");

// A copy as float for a F32 file: T -> float rounding to nearest, beyond float's range +-inf.
template <class T>
Array<float> to_float32(const Array<T>& a);

// ---- saving ------------------------------------------------------------------------------------

// A file of the folder and the function that writes its bytes.
struct FolderFile {
  std::string name;  // "config.json"
  std::function<void(std::ostream&)> write;
};

// Writes every file to a temporary name beside its target, then renames them into place: a failure
// before the renames leaves every old file as it was (std::runtime_error naming the file, "the
// folder's files are unchanged"). The folder is created when missing. A target that exists and is
// not a regular file is refused before anything is written; a symbolic link is written through (a
// link that points nowhere is refused). Two names that lead to one file are refused.
void write_files_together(const std::string& dir, const std::vector<FolderFile>& files,
                          const char* who = "write_files_together");

extern template std::map<std::string, Array<float>> load_hf_tensors<float>(const HFWeights&, const SafetensorsFilter&,
                                                                           const char*);
extern template std::map<std::string, Array<double>> load_hf_tensors<double>(const HFWeights&, const SafetensorsFilter&,
                                                                             const char*);
extern template Array<float> to_float32<float>(const Array<float>&);
extern template Array<float> to_float32<double>(const Array<double>&);

}  // namespace xgrad
