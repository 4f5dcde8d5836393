// The checks of a training program's file paths, before anything opens them: a FIFO would block
// the program forever, a device such as /dev/zero would be read without end, a folder is no file,
// and an output folder that does not exist would be found only after training.
#pragma once

#include <string>

#include <xgrad/train/settings.hpp>

namespace xgrad::train {

// What `path` is when it exists and is not a regular file (after symbolic links): "a FIFO (named
// pipe)", "a character device", "a folder", ...; empty for a regular file or nothing there. A
// program's path flags refuse those: reading a FIFO blocks, /dev/zero never ends. Uses stat(),
// which opens nothing.
std::string special_file_kind(const std::string& path);

// A file to be written (atomically, by rename) at `path`, given to `flag`: refused (Refused,
// naming the flag and the path) when it is a folder or another special file, or when its folder
// does not exist or is not writable. Empty: no file, nothing to check.
//   "--checkpoint out/x.ckpt: the folder out does not exist"
void check_output_file(const std::string& flag, const std::string& path);
// A folder to be written into (created when missing, with its missing parents): not a file, and
// the nearest existing folder above it writable.
void check_output_folder(const std::string& flag, const std::string& path);

}  // namespace xgrad::train
