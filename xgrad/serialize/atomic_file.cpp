// Temporary file + fsync + rename: the classic way to replace a file atomically on POSIX.
#include <xgrad/serialize/atomic_file.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <streambuf>
#include <vector>

namespace xgrad {

namespace {

std::string errno_text(int error) { return std::strerror(error); }

// An output stream buffer over a file descriptor that remembers the errno of the first failed
// write; after a failure it writes nothing more and reports failure to the stream.
class FdStreambuf : public std::streambuf {
 public:
  explicit FdStreambuf(int fd) : fd_(fd), buffer_(1 << 16) { reset(); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!flush_buffer()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }

  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (n <= 0) return 0;  // (an empty tensor's data() may be null: no memcpy from it)
    if (n <= epptr() - pptr()) {
      std::memcpy(pptr(), s, static_cast<std::size_t>(n));
      pbump(static_cast<int>(n));
      return n;
    }
    if (!flush_buffer()) return 0;
    return write_all(s, static_cast<std::size_t>(n));
  }

  int sync() override { return flush_buffer() ? 0 : -1; }

  // seekp/tellp: flushes, then moves the file offset (a writer may go back to fill in a header).
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode which) override {
    if (!(which & std::ios_base::out) || !flush_buffer()) return pos_type(off_type(-1));
    const int whence = dir == std::ios_base::beg ? SEEK_SET : dir == std::ios_base::cur ? SEEK_CUR : SEEK_END;
    const off_t at = ::lseek(fd_, static_cast<off_t>(off), whence);
    return at < 0 ? pos_type(off_type(-1)) : pos_type(off_type(at));
  }
  pos_type seekpos(pos_type pos, std::ios_base::openmode which) override {
    return seekoff(off_type(pos), std::ios_base::beg, which);
  }

 private:
  void reset() { setp(buffer_.data(), buffer_.data() + buffer_.size()); }

  bool flush_buffer() {
    const std::size_t n = static_cast<std::size_t>(pptr() - pbase());
    const bool ok = static_cast<std::size_t>(write_all(pbase(), n)) == n;
    reset();
    return ok;
  }

  // Returns the number of bytes written: n unless a write failed.
  std::streamsize write_all(const char* p, std::size_t n) {
    if (error_ != 0) return 0;
    std::size_t done = 0;
    while (done < n) {
      const ssize_t w = ::write(fd_, p + done, n - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        error_ = errno;
        break;
      }
      done += static_cast<std::size_t>(w);
    }
    return static_cast<std::streamsize>(done);
  }

  int fd_;
  int error_ = 0;
  std::vector<char> buffer_;
};

// Owns the temporary file until it is renamed into place: closes and removes it otherwise.
struct TemporaryFile {
  std::string path;
  int fd = -1;
  bool renamed = false;

  ~TemporaryFile() {
    if (fd >= 0) ::close(fd);
    if (!renamed && !path.empty()) ::unlink(path.c_str());
  }
};

std::string temporary_name(const std::filesystem::path& folder, const std::filesystem::path& name) {
  static std::atomic<unsigned long> counter{0};
  const auto clock = std::chrono::steady_clock::now().time_since_epoch().count();
  return (folder / ("." + name.string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                    std::to_string(counter++) + "-" + std::to_string(clock)))
      .string();
}

// The path a save writes: `path` itself, or the file a symbolic link at `path` resolves to.
// Refuses a dangling link and an existing target that is neither a regular file nor a folder
// (a folder is left to the rename, which fails).
std::string save_target(const std::string& path, const std::function<void(const std::string&)>& fail) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return path;  // nothing there yet (or unreachable: the open says why)
  std::string target = path;
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const std::filesystem::path resolved = std::filesystem::canonical(path, ec);
    if (ec) fail("it is a symbolic link that cannot be resolved (" + ec.message() + "); refusing to replace it");
    target = resolved.string();
    if (::stat(target.c_str(), &st) != 0) fail("cannot stat the link's target '" + target + "': " + errno_text(errno));
  }
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    fail(std::string("it is ") + detail::file_kind(st.st_mode) +
         (target != path ? " ('" + target + "')" : std::string()) + ", not a regular file; refusing to replace it");
  return target;
}

}  // namespace

void write_file_atomically(const std::string& requested, const std::function<void(std::ostream&)>& write) {
  const std::string prefix = "write_file_atomically: cannot save '" + requested + "': ";
  auto fail = [&](const std::string& reason) { throw std::runtime_error(prefix + reason); };

  if (requested.empty()) fail("the path is empty");
  if (!std::filesystem::path(requested).has_filename()) fail("the path names a folder, not a file");
  const std::string path = save_target(requested, fail);
  const std::filesystem::path target(path);
  const std::filesystem::path folder = target.has_parent_path() ? target.parent_path() : ".";

  TemporaryFile tmp;
  for (int attempt = 0; tmp.fd < 0; ++attempt) {
    tmp.path = temporary_name(folder, target.filename());
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (tmp.fd < 0) {
      const int error = errno;
      if (error != EEXIST || attempt >= 100) {
        tmp.path.clear();  // nothing was created
        fail("cannot create a temporary file in '" + folder.string() + "': " + errno_text(error));
      }
    }
  }

  struct stat previous {};
  if (::stat(path.c_str(), &previous) == 0 && S_ISREG(previous.st_mode))
    ::fchmod(tmp.fd, previous.st_mode & 07777);  // best effort: the content matters, not the mode

  {
    FdStreambuf buffer(tmp.fd);
    std::ostream out(&buffer);
    try {
      write(out);
    } catch (const std::exception& e) {
      const std::string io = buffer.error() ? errno_text(buffer.error()) + "; then " : "";
      std::throw_with_nested(std::runtime_error(prefix + io + "the writer threw: " + e.what()));
    } catch (...) {
      std::throw_with_nested(std::runtime_error(prefix + "the writer threw a non-standard exception"));
    }
    out.flush();
    if (buffer.error() != 0) fail("write failed: " + errno_text(buffer.error()));
    if (!out) fail("the writer left the stream in a failed state");
  }

  if (::fsync(tmp.fd) != 0) fail("fsync failed: " + errno_text(errno));
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail("close failed: " + errno_text(errno));
  if (::rename(tmp.path.c_str(), path.c_str()) != 0)
    fail("cannot rename the temporary file over it: " + errno_text(errno));
  tmp.renamed = true;

  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);  // best effort: some file systems cannot fsync a folder
    ::close(dir);
  }
}

// ---- appending -----------------------------------------------------------------------------------

AppendOnlyFile::AppendOnlyFile(const std::string& path, const std::string& initial) : path_(path) {
  write_file_atomically(path, [&](std::ostream& out) { out.write(initial.data(), std::streamsize(initial.size())); });
  const auto fail = [&](const std::string& reason) {
    throw std::runtime_error("AppendOnlyFile: cannot append to '" + path + "': " + reason);
  };
  // O_NONBLOCK: a FIFO swapped in since the rename must not block the open.
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) fail(errno_text(errno));
  struct stat st {};
  const bool stated = ::fstat(fd_, &st) == 0;
  if (!stated || !S_ISREG(st.st_mode)) {
    const std::string why =
        stated ? std::string("it is ") + detail::file_kind(st.st_mode) + ", not a regular file" : errno_text(errno);
    ::close(fd_);
    fd_ = -1;
    fail(why);
  }
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
}

AppendOnlyFile::~AppendOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendOnlyFile::append(const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw std::runtime_error("AppendOnlyFile: cannot append to '" + path_ + "': " + errno_text(errno));
    done += static_cast<std::size_t>(w);
  }
}

}  // namespace xgrad
