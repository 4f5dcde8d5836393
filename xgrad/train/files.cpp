#include "files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace xgrad::train {

std::string special_file_kind(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

void check_output_file(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) throw Refused(flag + " " + path + ": is a folder, expected a file name");
  const std::string kind = special_file_kind(path);
  if (!kind.empty()) throw Refused(flag + " " + path + ": it is " + kind + ", expected a regular file");
  const fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (!fs::is_directory(parent, ec))
    throw Refused(flag + " " + path + ": the folder " + parent.string() + " does not exist");
  if (::access(parent.c_str(), W_OK) != 0)
    throw Refused(flag + " " + path + ": the folder " + parent.string() + " is not writable");
  if (fs::exists(p, ec) && ::access(p.c_str(), W_OK) != 0)
    throw Refused(flag + " " + path + ": the file is not writable");
}

void check_output_folder(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  if (fs::exists(p, ec) && !fs::is_directory(p, ec))
    throw Refused(flag + " " + path + ": is a file, expected a folder");
  while (!fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  if (p.empty() || !fs::exists(p, ec)) p = ".";
  if (!fs::is_directory(p, ec)) throw Refused(flag + " " + path + ": " + p.string() + " is not a folder");
  if (::access(p.c_str(), W_OK) != 0)
    throw Refused(flag + " " + path + ": the folder " + p.string() + " is not writable");
}

}  // namespace xgrad::train

// ---- a run's paths together ----------------------------------------------------------------------

namespace xgrad::train {

RunPath RunPath::input(std::string flag, std::string path) { return {std::move(flag), std::move(path), Role::input}; }
RunPath RunPath::output(std::string flag, std::string path) { return {std::move(flag), std::move(path), Role::output}; }
RunPath RunPath::input_folder(std::string flag, std::string dir, std::vector<std::string> inside) {
  return {std::move(flag), std::move(dir), Role::input, true, std::move(inside)};
}
RunPath RunPath::output_folder(std::string flag, std::string dir, std::vector<std::string> inside) {
  return {std::move(flag), std::move(dir), Role::output, true, std::move(inside)};
}
RunPath RunPath::may_replace(std::string input_flag) && {
  replaceable.push_back(std::move(input_flag));
  return std::move(*this);
}

namespace {

// Which file a path names: its device and inode when it exists (after symbolic links), else the
// path with the folders above it resolved (std::filesystem::weakly_canonical).
struct FileId {
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  std::string resolved;

  bool operator==(const FileId& o) const {
    return exists == o.exists && (exists ? device == o.device && inode == o.inode : resolved == o.resolved);
  }
};

FileId file_id(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return {true, st.st_dev, st.st_ino, ""};
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  const std::filesystem::path resolved = std::filesystem::weakly_canonical(absolute, ec);
  return {false, 0, 0, (ec ? absolute.lexically_normal() : resolved).string()};
}

// A file of the run: a RunPath's own path ("" name), or one of the files inside its folder.
struct RunFile {
  const RunPath* of;
  std::string name;
  FileId id;

  std::string describe() const {
    return of->flag + " " + of->path + (name.empty() ? std::string() : " (its " + name + ")");
  }
};

// Two outputs, or an output and an input, that may not name the same file.
bool must_differ(const RunPath& a, const RunPath& b) {
  using Role = RunPath::Role;
  if (a.role == Role::input && b.role == Role::input) return false;
  const RunPath& out = a.role == Role::output ? a : b;
  const RunPath& in = a.role == Role::output ? b : a;
  if (in.role == Role::input)
    for (const std::string& flag : out.replaceable)
      if (flag == in.flag) return false;
  return true;
}

void refuse_collisions(const std::vector<RunPath>& paths) {
  std::vector<RunFile> files;
  for (const RunPath& p : paths) {
    if (p.path.empty()) continue;
    files.push_back({&p, "", file_id(p.path)});
    for (const std::string& name : p.inside) files.push_back({&p, name, file_id(std::filesystem::path(p.path) / name)});
  }
  for (std::size_t i = 0; i < files.size(); ++i)
    for (std::size_t j = i + 1; j < files.size(); ++j) {
      const RunFile &a = files[i], &b = files[j];
      const bool folders = a.name.empty() && a.of->folder && b.name.empty() && b.of->folder;  // their files may differ
      if (a.of == b.of || folders || !must_differ(*a.of, *b.of) || !(a.id == b.id)) continue;
      const bool outputs = a.of->role == RunPath::Role::output && b.of->role == RunPath::Role::output;
      throw Refused(a.describe() + " and " + b.describe() + " name the same file: " +
                    (outputs ? "two outputs would overwrite each other" : "an output would overwrite an input") +
                    "; expected different files");
    }
}

void check_input(const RunPath& p) {
  std::error_code ec;
  if (p.path.empty() || !std::filesystem::exists(p.path, ec)) return;  // the program says what is missing
  const bool is_folder = std::filesystem::is_directory(p.path, ec);
  if (p.folder && !is_folder) throw Refused("cannot read " + p.flag + " " + p.path + ": is a file, expected a folder");
  const std::string kind = special_file_kind(p.path);
  if (!p.folder && !kind.empty())
    throw Refused("cannot read " + p.flag + " " + p.path + ": it is " + kind + ", not a regular file");
}

}  // namespace

void check_run_paths(const std::vector<RunPath>& paths) {
  refuse_collisions(paths);  // first: a message naming both flags says more than either path's own check
  for (const RunPath& p : paths) {
    if (p.role == RunPath::Role::input)
      check_input(p);
    else if (p.folder)
      check_output_folder(p.flag, p.path);
    else
      check_output_file(p.flag, p.path);
  }
}

}  // namespace xgrad::train
