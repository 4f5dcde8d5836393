// Regular files, size bounds and number conversions: the input layer (input.hpp).
#include <xgrad/base/input.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include <xgrad/base/check.hpp>

namespace xgrad {

namespace {

std::string errno_text(int error) { return std::strerror(error); }

std::string bytes_text(std::uint64_t n) {
  return std::to_string(n) + " bytes" + (n >= (1u << 20) ? " (" + std::to_string(n >> 20) + " MiB)" : "");
}

}  // namespace

namespace detail {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

}  // namespace detail

// ---- files ---------------------------------------------------------------------------------------

RegularFile::RegularFile(const char* who, const std::string& path) : who_(who), path_(path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(who_ + ": cannot open '" + path + "': " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int error = errno;
    ::close(fd_);
    throw std::runtime_error(who_ + ": cannot stat '" + path + "': " + errno_text(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw std::runtime_error(who_ + ": cannot read '" + path + "': it is " + detail::file_kind(st.st_mode) +
                             ", not a regular file");
  }
  // Back to blocking reads (O_NONBLOCK means nothing for a regular file, but say what we mean).
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<std::uint64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::uint64_t RegularFile::read_at(std::uint64_t offset, std::uint64_t n, void* out) const {
  std::uint64_t done = 0;
  while (done < n) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(n - done, 1u << 30));
    const ssize_t r = ::pread(fd_, static_cast<char*>(out) + done, chunk, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(who_ + ": cannot read '" + path_ + "': " + errno_text(errno));
    }
    if (r == 0) break;  // the end of the file
    done += static_cast<std::uint64_t>(r);
  }
  return done;
}

void RegularFile::check_size(std::uint64_t max_bytes, const char* what) const {
  if (size_ > max_bytes)
    throw FormatError(who_ + ": '" + path_ + "' is " + bytes_text(size_) + ", more than the " + bytes_text(max_bytes) +
                      " a " + what + " may be");
}

namespace {

// Files of procfs and sysfs report a size of 0 and still hold text: read to their end, up to
// max_bytes (a file that keeps growing must not fill the memory).
std::string read_unsized(const RegularFile& file, std::uint64_t max_bytes, const char* what) {
  std::string bytes;
  char chunk[1 << 16];
  for (std::uint64_t n; (n = file.read_at(bytes.size(), sizeof chunk, chunk)) > 0;) {
    bytes.append(chunk, static_cast<std::size_t>(n));
    if (bytes.size() > max_bytes)
      throw FormatError(file.who() + ": '" + file.path() + "' reports a size of 0 but holds more than the " +
                        bytes_text(max_bytes) + " a " + what + " may be");
  }
  return bytes;
}

std::string read_sized(const RegularFile& file) {
  std::string bytes;
  try {
    bytes.resize(static_cast<std::size_t>(file.size()));
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(file.who(), "to read '" + file.path() + "' (" + bytes_text(file.size()) + ")");
  } catch (const std::length_error&) {
    throw OutOfMemoryError(file.who(), "to read '" + file.path() + "' (" + bytes_text(file.size()) + ")");
  }
  bytes.resize(static_cast<std::size_t>(file.read_at(0, file.size(), bytes.data())));
  return bytes;
}

}  // namespace

std::string read_regular_file(const char* who, const std::string& path, std::uint64_t max_bytes, const char* what) {
  const RegularFile file(who, path);
  if (file.size() == 0) return read_unsized(file, max_bytes, what);
  file.check_size(max_bytes, what);
  return read_sized(file);
}

std::string read_regular_file(const char* who, const std::string& path) {
  const RegularFile file(who, path);
  if (file.size() == 0) return read_unsized(file, std::uint64_t(64) << 20, "file that reports a size of 0");
  return read_sized(file);
}

bool is_readable_regular_file(const std::string& path) {
  try {
    const RegularFile file("is_readable_regular_file", path);
    return true;
  } catch (const std::runtime_error&) {
    return false;
  }
}

// Buffered reads through RegularFile::read_at.
class InputFileStream::Buffer : public std::streambuf {
 public:
  Buffer(const char* who, const std::string& path) : file_(who, path), buffer_(1 << 16) {}

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    // A read error throws: the istream catches it and sets badbit.
    const std::uint64_t n = file_.read_at(offset_, buffer_.size(), buffer_.data());
    if (n == 0) return traits_type::eof();
    offset_ += n;
    setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  RegularFile file_;
  std::vector<char> buffer_;
  std::uint64_t offset_ = 0;
};

InputFileStream::InputFileStream(const char* who, const std::string& path)
    : std::istream(nullptr), buffer_(std::make_unique<Buffer>(who, path)) {
  rdbuf(buffer_.get());
}

InputFileStream::~InputFileStream() = default;

// ---- numbers ------------------------------------------------------------------------------------

template <class T>
NumberStatus integer_from_text(std::string_view text, T& out) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  const char* first = text.data();
  const char* last = first + text.size();
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || (text[0] == '-' && text.size() > 1)))
    return NumberStatus::malformed;
  if (text[0] == '-' && !std::is_signed_v<T>) {
    // "-0" is 0; any other negative number is below an unsigned type's range.
    if (text.find_first_not_of("0", 1) == std::string_view::npos) return (out = 0, NumberStatus::ok);
    return text.find_first_not_of("0123456789", 1) == std::string_view::npos ? NumberStatus::out_of_range
                                                                             : NumberStatus::malformed;
  }
  T value{};
  const auto [end, error] = std::from_chars(first, last, value, 10);
  if (error == std::errc::invalid_argument) return NumberStatus::malformed;
  if (error == std::errc::result_out_of_range) {
    // from_chars stops at the end of the digits: the rest must be digits too.
    for (const char* p = end; p < last; ++p)
      if (!std::isdigit(static_cast<unsigned char>(*p))) return NumberStatus::malformed;
    return NumberStatus::out_of_range;
  }
  if (end != last) return NumberStatus::malformed;
  out = value;
  return NumberStatus::ok;
}

NumberStatus number_from_text(std::string_view text, double& out) {
  // strtod skips leading space and stops at a NUL: both are refused here.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || text.find('\0') != std::string_view::npos)
    return NumberStatus::malformed;
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size()) return NumberStatus::malformed;
  if (errno == ERANGE && std::isinf(value)) return NumberStatus::out_of_range;
  out = value;
  return NumberStatus::ok;
}

std::string quote_excerpt(std::string_view text) {
  constexpr std::size_t kShown = 40;
  std::string out = "'";
  for (std::size_t i = 0; i < std::min(text.size(), kShown); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f || c == '\\' || c == '\'') {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += text.size() > kShown ? "...' (" + std::to_string(text.size()) + " bytes)" : "'";
  return out;
}

template <class T>
T parse_integer(const std::string& what, std::string_view text, T lo, T hi) {
  T value{};
  if (integer_from_text(text, value) != NumberStatus::ok || value < lo || value > hi)
    throw FormatError(
        detail::concat(what, ": expected an integer in [", +lo, ", ", +hi, "], got ", quote_excerpt(text)));
  return value;
}

double parse_number(const std::string& what, std::string_view text, double lo, double hi, bool allow_nan) {
  double value = 0;
  const NumberStatus status = number_from_text(text, value);
  const bool ok = status == NumberStatus::ok && (std::isnan(value) ? allow_nan : value >= lo && value <= hi);
  if (!ok)
    throw FormatError(detail::concat(what, ": expected a number in [", lo, ", ", hi, "]", allow_nan ? " or nan" : "",
                                     ", got ", quote_excerpt(text)));
  return value;
}

#define XGRAD_INSTANTIATE(T)                                        \
  template NumberStatus integer_from_text<T>(std::string_view, T&); \
  template T parse_integer<T>(const std::string&, std::string_view, T, T);
XGRAD_INSTANTIATE(signed char)
XGRAD_INSTANTIATE(unsigned char)
XGRAD_INSTANTIATE(short)
XGRAD_INSTANTIATE(unsigned short)
XGRAD_INSTANTIATE(int)
XGRAD_INSTANTIATE(unsigned int)
XGRAD_INSTANTIATE(long)
XGRAD_INSTANTIATE(unsigned long)
XGRAD_INSTANTIATE(long long)
XGRAD_INSTANTIATE(unsigned long long)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
