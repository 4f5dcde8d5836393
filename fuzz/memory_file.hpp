// A fuzz input as a file path without touching the disk: an anonymous memory file (memfd) that
// the loaders open as /proc/self/fd/N -- a regular file to fstat, as a file on disk is.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <string>

namespace xgrad_fuzz {

class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("xgrad-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  // Replaces the content with `size` bytes of `data`.
  void write(const void* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::pwrite(fd_, static_cast<const char*>(data) + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
  }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace xgrad_fuzz
