// Output paths checked before a program starts its work, so that a typo in --checkpoint or
// --save-hf fails at once, naming the flag, rather than after an hour of training: the library's
// xgrad::train::check_output_file / check_output_folder (the Trainer checks its own paths with them).
#pragma once

#include <string>

#include <xgrad/train/trainer.hpp>

namespace output_paths {

// A file to be written (atomically, by rename): its folder must exist and be writable, and it must
// not be a folder. Empty: no file, nothing to check.
inline void check_file(const std::string& flag, const std::string& path) {
  xgrad::train::check_output_file(flag, path);
}

// A folder to be written into (created when missing, with its missing parents): not a file, and
// the nearest existing folder above it writable.
inline void check_folder(const std::string& flag, const std::string& path) {
  xgrad::train::check_output_folder(flag, path);
}

}  // namespace output_paths
