// The checks of a training program's file paths, before anything opens them: a FIFO would block
// the program forever, a device such as /dev/zero would be read without end, a folder is no file,
// an output folder that does not exist would be found only after training, and two paths that
// name one file would have one output overwrite another, or an input (check_run_paths).
#pragma once

#include <string>
#include <vector>

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

// One path a run reads or writes, for check_run_paths. `flag` names it in messages: the flag the
// user gave ("--csv"), or, for a file a program derives from one, what it is ("the tokenizer file
// of --checkpoint"). A folder lists the names the run reads or writes in it (`inside`).
//   RunPath::output("--csv", csv), RunPath::input("--text", text),
//   RunPath::output_folder("--save-hf", dir, {"config.json", "model.safetensors"}),
//   RunPath::output("--checkpoint", ckpt).may_replace("--resume")  // it rewrites what it resumed
struct RunPath {
  enum class Role { input, output };
  std::string flag;
  std::string path;  // empty: not given, nothing checked
  Role role = Role::input;
  bool folder = false;
  std::vector<std::string> inside = {};       // a folder's files, by name
  std::vector<std::string> replaceable = {};  // an output's: the input flags it may name

  static RunPath input(std::string flag, std::string path);
  static RunPath output(std::string flag, std::string path);
  static RunPath input_folder(std::string flag, std::string dir, std::vector<std::string> inside);
  static RunPath output_folder(std::string flag, std::string dir, std::vector<std::string> inside);
  // This output may name the same file as the input `input_flag`: the run reads that input whole
  // before it writes the output (atomically), as a resumed run rewrites its checkpoint.
  RunPath may_replace(std::string input_flag) &&;
};

// A run's paths checked together, before it reads or writes anything (Refused otherwise):
//  - no two outputs, and no output and input, name the same file: the same device and inode when
//    the file exists (a symbolic or hard link to it counts), else the same path once the folders
//    above it are resolved; a folder counts as a file (two folders may be one, when the files
//    they name inside differ), and so does each file of its `inside`. The
//    message names both flags and paths:
//      "--tokens x.tok and --csv ./x.tok name the same file: two outputs would overwrite each other"
//      "--checkpoint gpt2/model.safetensors and --hf gpt2 (its model.safetensors) name the same file:
//       an output would overwrite an input"
//  - each output as check_output_file or check_output_folder checks it;
//  - an input that exists and is not a regular file (a FIFO, a device; a folder given as a file,
//    a file given as a folder) is refused; a missing input is left to the program to report.
void check_run_paths(const std::vector<RunPath>& paths);

}  // namespace xgrad::train
