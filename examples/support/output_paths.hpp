// Output paths checked before a program starts its work, so that a typo in --checkpoint or
// --save-hf fails at once, naming the flag, rather than after an hour of training.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include <xgrad/train/trainer.hpp>

namespace output_paths {

namespace detail {
// The nearest folder that exists at or above `p` must be a writable folder.
inline void check_ancestor(const std::string& flag, const std::string& path, std::filesystem::path p) {
  std::error_code ec;
  if (p.empty()) p = ".";
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  if (!std::filesystem::exists(p, ec)) p = ".";
  if (!std::filesystem::is_directory(p, ec))
    throw xgrad::train::Refused(flag + " " + path + ": " + p.string() + " is not a folder");
  if (::access(p.c_str(), W_OK) != 0)
    throw xgrad::train::Refused(flag + " " + path + ": the folder " + p.string() + " is not writable");
}
}  // namespace detail

// A file to be written (atomically, by rename): its folder must exist and be writable, and it must
// not be a folder. Empty: no file, nothing to check.
inline void check_file(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  const std::filesystem::path p(path);
  if (std::filesystem::is_directory(p, ec))
    throw xgrad::train::Refused(flag + " " + path + ": is a folder, expected a file name");
  const std::filesystem::path parent = p.parent_path().empty() ? std::filesystem::path(".") : p.parent_path();
  if (!std::filesystem::is_directory(parent, ec))
    throw xgrad::train::Refused(flag + " " + path + ": the folder " + parent.string() + " does not exist");
  if (::access(parent.c_str(), W_OK) != 0)
    throw xgrad::train::Refused(flag + " " + path + ": the folder " + parent.string() + " is not writable");
}

// A folder to be written into (created when missing, with its missing parents): not a file, and
// the nearest existing folder above it writable.
inline void check_folder(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  const std::filesystem::path p(path);
  if (std::filesystem::exists(p, ec) && !std::filesystem::is_directory(p, ec))
    throw xgrad::train::Refused(flag + " " + path + ": is a file, expected a folder");
  detail::check_ancestor(flag, path, p);
}

}  // namespace output_paths
