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
