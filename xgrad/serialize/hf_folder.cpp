// A Hugging Face folder's files: its JSON files and safetensors headers read with bounds before any
// tensor, the shards checked against their index, and the files of a save staged together.
#include <xgrad/serialize/hf_folder.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>

#include <xgrad/base/json_input.hpp>
#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/serialize/format_error.hpp>

namespace xgrad {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

template <class... Args>
[[noreturn]] void malformed(const char* who, const std::string& file, const Args&... args) {
  throw FormatError(detail::concat(who, ": '", file, "': ", args...));
}

// A string as a JSON literal (control characters escaped, invalid UTF-8 replaced).
std::string quote(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

// A safetensors header; a file that cannot be opened is reported with the entry that names it.
SafetensorsHeader read_header(const char* who, const std::string& path, const std::string& listed_in,
                              const std::string& first_key) {
  try {
    return read_safetensors_header(path);
  } catch (const FormatError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(detail::concat(who, ": '", listed_in, "': tensor ", quote(first_key), " is in '", path,
                                            "', which cannot be read: ", e.what()));
  }
}

HFWeights read_single(const std::string& path) {
  HFWeights w;
  w.listing = path;
  w.files.push_back(path);
  for (auto& e : read_safetensors_header(path).tensors) {
    const std::string name = e.name;
    w.tensors[name] = HFTensor{path, std::move(e)};
  }
  return w;
}

// The index's "weight_map": each shard file name (in the order first listed) and the names it holds.
std::vector<std::pair<std::string, std::vector<std::string>>> read_weight_map(const char* who,
                                                                              const std::string& index_path) {
  const json index = read_hf_json(who, index_path);
  if (!index.is_object()) malformed(who, index_path, "the index is not a JSON object (it is ", index.type_name(), ")");
  const auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object())
    malformed(who, index_path, "\"weight_map\" must be an object of tensor name -> shard file name",
              map == index.end() ? " (it is missing)" : ", got " + describe_json(*map));
  std::vector<std::pair<std::string, std::vector<std::string>>> shards;
  std::map<std::string, std::size_t> position;  // file name -> its place in shards
  for (const auto& [name, file] : map->items()) {
    if (!file.is_string())
      malformed(who, index_path, "\"weight_map\" entry ", quote(name), " is not a file name: ", describe_json(file));
    const std::string f = file.get<std::string>();
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\0') != std::string::npos)
      malformed(who, index_path, "\"weight_map\" entry ", quote(name), ": ", quote(f),
                " is not a file name in the folder");
    const auto [it, added] = position.emplace(f, shards.size());
    if (added) shards.emplace_back(f, std::vector<std::string>{});
    shards[it->second].second.push_back(name);
  }
  if (shards.empty()) malformed(who, index_path, "\"weight_map\" lists no tensor");
  return shards;
}

HFWeights read_sharded(const std::string& dir, const std::string& index_path, const char* who) {
  HFWeights w;
  w.listing = index_path;
  const auto shards = read_weight_map(who, index_path);
  std::vector<SafetensorsHeader> headers;  // every shard's first, so that a missing one is named first
  for (const auto& [file, names] : shards) {
    w.files.push_back(hf_file(dir, file));
    headers.push_back(read_header(who, w.files.back(), index_path, names.front()));
  }
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const std::string& path = w.files[k];
    const std::vector<std::string>& listed = shards[k].second;
    const std::set<std::string> here(listed.begin(), listed.end());
    for (auto& e : headers[k].tensors) {
      if (here.count(e.name) == 0)
        malformed(who, path, "tensor ", quote(e.name), " is not listed for this shard in the \"weight_map\" of '",
                  index_path, "'");
      const std::string name = e.name;
      w.tensors[name] = HFTensor{path, std::move(e)};
    }
    for (const std::string& name : listed)
      if (w.tensors.count(name) == 0)
        malformed(who, path, "no tensor ", quote(name), ", which the \"weight_map\" of '", index_path,
                  "' places in it");
  }
  return w;
}

// Each file's final path (links resolved) and a staging path beside it; refuses special files, links
// to nothing and two names for one file before anything is written.
std::vector<std::pair<std::string, std::string>> staging_paths(const std::string& dir,
                                                               const std::vector<FolderFile>& files, const char* who) {
  static std::atomic<unsigned> counter{0};
  const std::string tag = ".xgrad-save-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  std::vector<std::pair<std::string, std::string>> paths;
  std::map<std::string, std::string> names;  // target -> the file name that leads there
  std::error_code ec;
  for (const FolderFile& f : files) {
    const fs::path path = fs::path(dir) / f.name;
    fs::path target = path;
    if (fs::is_symlink(fs::symlink_status(path, ec))) {
      target = fs::canonical(path, ec);
      if (ec)
        throw std::runtime_error(detail::concat(who, ": cannot save '", path.string(),
                                                "': it is a symbolic link that points nowhere (", ec.message(), ")"));
    }
    const fs::file_status status = fs::status(target, ec);
    if (fs::exists(status) && !fs::is_regular_file(status))
      throw std::runtime_error(
          detail::concat(who, ": cannot save '", path.string(), "': it exists and is not a regular file"));
    const fs::path resolved = fs::weakly_canonical(target, ec);
    const auto [it, added] = names.emplace(ec ? target.string() : resolved.string(), f.name);
    if (!added)
      throw std::runtime_error(detail::concat(who, ": cannot save '", path.string(), "': it is the same file as '",
                                              hf_file(dir, it->second), "'"));
    paths.emplace_back(target.string(), (target.parent_path() / ("." + target.filename().string() + tag)).string());
  }
  return paths;
}

}  // namespace

std::string hf_file(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

bool hf_file_exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::status(path, ec));
}

json read_hf_json(const char* who, const std::string& path) {
  return read_json_file(who, path, kMaxHFJsonBytes, "config or index file", kMaxJsonDepth);
}

json read_hf_config(const char* who, const std::string& dir) {
  const std::string path = hf_file(dir, "config.json");
  if (!hf_file_exists(path))
    throw std::runtime_error(detail::concat(who, ": '", path,
                                            "' does not exist: a Hugging Face model folder holds "
                                            "config.json and model.safetensors"));
  return read_hf_json(who, path);
}

std::optional<json> read_hf_generation_config(const char* who, const std::string& dir) {
  const std::string path = hf_file(dir, "generation_config.json");
  if (!hf_file_exists(path)) return std::nullopt;
  json g = read_hf_json(who, path);
  if (!g.is_object()) malformed(who, path, "not a JSON object (it is ", g.type_name(), ")");
  return g;
}

bool has_hf_weights(const std::string& dir) {
  return hf_file_exists(hf_file(dir, "model.safetensors")) ||
         hf_file_exists(hf_file(dir, "model.safetensors.index.json"));
}

HFWeights read_hf_weights(const std::string& dir, const char* who) {
  const std::string single = hf_file(dir, "model.safetensors"), index = hf_file(dir, "model.safetensors.index.json");
  if (hf_file_exists(single)) return read_single(single);
  if (hf_file_exists(index)) return read_sharded(dir, index, who);
  throw std::runtime_error(detail::concat(who, ": '", dir,
                                          "' has neither model.safetensors nor "
                                          "model.safetensors.index.json (xgrad reads the safetensors format only)"));
}

bool hf_loadable_dtype(const std::string& dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
}

const HFTensor& expect_hf_tensor(const HFWeights& weights, const std::string& name, const Shape& shape,
                                 const std::string& origin, const char* who) {
  const auto it = weights.tensors.find(name);
  if (it == weights.tensors.end())
    malformed(who, weights.listing, "missing tensor ", quote(name), " (of shape ", shape_str(shape), " ", origin, ")");
  const HFTensor& t = it->second;
  if (t.entry.shape != shape)
    malformed(who, t.file, "tensor ", quote(name), " has shape ", shape_str(t.entry.shape), ", expected ",
              shape_str(shape), " ", origin);
  if (!hf_loadable_dtype(t.entry.dtype))
    malformed(who, t.file, "tensor ", quote(name), " has dtype ", t.entry.dtype,
              ": xgrad loads F32, F16, BF16 and F64");
  return t;
}

template <class T>
std::map<std::string, Array<T>> load_hf_tensors(const HFWeights& weights, const SafetensorsFilter& keep,
                                                const char* who) {
  std::map<std::string, Array<T>> values;
  for (const std::string& file : weights.files)
    for (auto& [name, array] : load_safetensors_if<T>(file, keep)) values[name] = std::move(array);
  // The files may have changed since their headers were read: the tensors must be those described.
  const auto changed = [&](const std::string& name) {
    malformed(who, weights.listing, "tensor ", quote(name), " changed while the checkpoint was read");
  };
  for (const auto& [name, array] : values) {
    const auto it = weights.tensors.find(name);
    if (it == weights.tensors.end() || it->second.entry.shape != shape_of(array)) changed(name);
  }
  for (const auto& [name, tensor] : weights.tensors)
    if (keep(name) && values.count(name) == 0) changed(name);
  return values;
}

template <class T>
Array<float> to_float32(const Array<T>& a) {
  if constexpr (std::is_same_v<T, float>) {
    return a;
  } else {
    Array<float> f = empty_array<float>(shape_of(a), "to_float32");
    constexpr double kMax = static_cast<double>(std::numeric_limits<float>::max());
    const double overflow = std::ldexp(2.0 - std::ldexp(1.0, -24), 127);  // FLT_MAX + half an ulp: rounds to inf
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double v = a.data()[i];
      const double clamped = std::abs(v) >= overflow ? std::copysign(HUGE_VAL, v)  // infinities too
                             : std::abs(v) > kMax    ? std::copysign(kMax, v)
                                                     : v;
      f.data()[i] = static_cast<float>(clamped);
    }
    return f;
  }
}

void write_files_together(const std::string& dir, const std::vector<FolderFile>& files, const char* who) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(detail::concat(who, ": cannot create the folder '", dir, "': ", ec.message()));
  if (!fs::is_directory(dir, ec)) throw std::runtime_error(detail::concat(who, ": '", dir, "' is not a folder"));
  const auto paths = staging_paths(dir, files, who);  // (target, staging) per file
  std::vector<bool> staged(files.size(), false);
  const auto unstage = [&] {
    for (std::size_t i = 0; i < files.size(); ++i)
      if (staged[i]) fs::remove(paths[i].second, ec);
  };
  for (std::size_t i = 0; i < files.size(); ++i) {
    try {
      write_file_atomically(paths[i].second, files[i].write);
      staged[i] = true;
    } catch (const std::exception& e) {
      unstage();
      throw std::runtime_error(detail::concat(who, ": cannot write '", hf_file(dir, files[i].name), "': ", e.what(),
                                              " (the folder's files are unchanged)"));
    }
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (::rename(paths[i].second.c_str(), paths[i].first.c_str()) != 0) {
      const int error = errno;
      unstage();
      std::string replaced;  // the files renamed before it
      for (std::size_t k = 0; k < i; ++k) replaced += (k ? ", " : "") + files[k].name;
      throw std::runtime_error(detail::concat(
          who, ": cannot rename the new '", hf_file(dir, files[i].name), "' into place: ", std::strerror(error),
          i == 0 ? " (the folder's files are unchanged)" : " (" + replaced + " already replaced)"));
    }
    staged[i] = false;
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);  // best effort, so the renames survive a power loss
    ::close(fd);
  }
}

template std::map<std::string, Array<float>> load_hf_tensors<float>(const HFWeights&, const SafetensorsFilter&,
                                                                    const char*);
template std::map<std::string, Array<double>> load_hf_tensors<double>(const HFWeights&, const SafetensorsFilter&,
                                                                      const char*);
template Array<float> to_float32<float>(const Array<float>&);
template Array<float> to_float32<double>(const Array<double>&);

}  // namespace xgrad
