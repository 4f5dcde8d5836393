// The examples' input files: a path flag names a regular file, read at most to the size fstat
// gives (xgrad::read_regular_file). A FIFO would block the program forever, /dev/zero or
// /dev/urandom would be read until memory runs out: both are refused before anything is opened.
#pragma once

#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include <xgrad/serialize/safetensors.hpp>

#include <xgrad/base/input.hpp>
#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/train/settings.hpp>
#include <xgrad/train/trainer.hpp>

namespace files {

// Refuses (xgrad::train::Refused) a `path` given to `flag` that exists and is not a regular file
// (a FIFO, a device, a folder): "cannot read --text /dev/zero: it is a character device, not a
// regular file; expected a UTF-8 text file".
inline void refuse_special(const std::string& flag, const std::string& path, const std::string& expected) {
  const std::string kind = xgrad::train::special_file_kind(path);
  if (!kind.empty())
    throw xgrad::train::Refused("cannot read " + flag + " " + path + ": it is " + kind +
                                ", not a regular file; expected " + expected);
}

// The whole of the regular file `path` given to `flag`; Refused (naming the flag, the path, the
// reason and what was expected) when it is missing, unreadable or not a regular file.
inline std::string read(const std::string& flag, const std::string& path, const std::string& expected) {
  refuse_special(flag, path, expected);
  try {
    return xgrad::read_regular_file(flag.c_str(), path);
  } catch (const std::exception& e) {
    // "--text: cannot open 'x.txt': No such file or directory" -> "No such file or directory"
    std::string why = e.what();
    const std::string quoted = "'" + path + "': ";
    if (const auto at = why.find(quoted); at != std::string::npos) why = why.substr(at + quoted.size());
    throw xgrad::train::Refused("cannot read " + flag + " " + path + ": expected " + expected + " (" + why + ")");
  }
}

// The safetensors file `path` given to `flag` into `model` (same names and shapes), or Refused.
template <class Module>
void load_weights(const std::string& flag, const std::string& path, Module& model) {
  refuse_special(flag, path, "a safetensors file");
  if (!xgrad::is_readable_regular_file(path))
    throw xgrad::train::Refused("cannot read " + flag + " " + path + ": expected a safetensors file");
  try {
    model.load_state_dict(xgrad::load_safetensors_state_dict<float>(path));
  } catch (const std::exception& e) {
    throw xgrad::train::Refused(flag + " " + path + " does not fit this model: " + e.what());
  }
}

// A file the program made for the run (finetune_gpt2's token file), removed when the scope is left
// by an exception: a failed run leaves nothing behind, and a later run makes the file again. Kept
// when the scope ends normally (a run stopped by Ctrl-C too: --resume reuses it). Empty: nothing.
struct RemovedOnError {
  std::string path;
  RemovedOnError() = default;
  RemovedOnError(const RemovedOnError&) = delete;
  RemovedOnError& operator=(const RemovedOnError&) = delete;
  ~RemovedOnError() {
    std::error_code ec;
    if (!path.empty() && std::uncaught_exceptions() > 0) std::filesystem::remove(path, ec);
  }
};

}  // namespace files
