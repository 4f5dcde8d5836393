// The input layer: every file the library or an example reads comes in here, and every number
// read from a file or from text is converted here (docs/reliability.md, "Input rule").
//
//   const std::string bytes = read_regular_file("BPETokenizer", path, 256 << 20, "tokenizer file");
//   const int steps = parse_integer<int>("run.ckpt: metadata max_steps", text, 0);
//
// - Regular files only: a folder, a device (/dev/zero is endless), a FIFO (which blocks the open)
//   or a socket is refused before anything is read. A caller that reads piece by piece asks for
//   it (RegularFile, InputFileStream); the same checks hold.
// - A size bound, checked against fstat's size before any byte is read or allocated.
// - Numbers: the whole text, decimal, in the C++ type's range and the caller's, else an error
//   naming what was read ("file: key") and quoting (a bounded excerpt of) the text.
// JSON goes through base/json_input.hpp, which builds on this.
// Every refusal here is a std::runtime_error (FormatError for malformed content) naming the file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <istream>
#include <limits>
#include <memory>
#include <streambuf>
#include <string>
#include <string_view>
#include <type_traits>

#include <xgrad/serialize/format_error.hpp>

namespace xgrad {

// Reads a regular file piece by piece. The file is opened with O_NONBLOCK (so a FIFO without a
// writer cannot block the open) and then fstat'ed: anything but a regular file is refused with a
// std::runtime_error that names `who`, the path and what it is.
class RegularFile {
 public:
  RegularFile(const char* who, const std::string& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  std::uint64_t size() const { return size_; }  // as fstat reported at open
  int fd() const { return fd_; }                // open for reading until destruction (for mmap)
  const std::string& path() const { return path_; }
  const std::string& who() const { return who_; }
  // Reads up to n bytes at offset into out; returns how many were read (fewer at the end of the
  // file). Throws std::runtime_error on an I/O error.
  std::uint64_t read_at(std::uint64_t offset, std::uint64_t n, void* out) const;
  // Throws FormatError "who: 'path' is N bytes, more than the M bytes a <what> may be" when the
  // file is larger than max_bytes.
  void check_size(std::uint64_t max_bytes, const char* what) const;

 private:
  std::string who_, path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// A whole regular file of at most `max_bytes` (checked from fstat before reading; `what` names
// the kind of file in the refusal: "tokenizer file"). At most the size fstat reports is read (a
// file that grows meanwhile is cut there; one that shrinks gives fewer bytes, which the parsers
// refuse). procfs and sysfs files report a size of 0: they are read to their end, up to the bound.
std::string read_regular_file(const char* who, const std::string& path, std::uint64_t max_bytes, const char* what);

// The same, bounded only by memory: a file larger than the process can hold gives an
// OutOfMemoryError (a std::bad_alloc) naming `who`, the file and its size.
std::string read_regular_file(const char* who, const std::string& path);

// True when `path` can be opened for reading and is a regular file (a FIFO is not opened for good,
// a folder or device is false). For a program's "is there a checkpoint?" before loading it.
bool is_readable_regular_file(const std::string& path);

// A regular file as a std::istream, for a caller that streams it (a text tokenized by chunks):
// the checks of RegularFile, then buffered reads. A read error sets badbit.
class InputFileStream : public std::istream {
 public:
  InputFileStream(const char* who, const std::string& path);
  ~InputFileStream() override;

 private:
  class Buffer;
  std::unique_ptr<Buffer> buffer_;
};

// ---- numbers --------------------------------------------------------------------------------

enum class NumberStatus { ok, malformed, out_of_range };

// `text` as an integer of type T: optional '-' (signed T only), then decimal digits, nothing else
// (no space, no '+', no "0x"); malformed otherwise, out_of_range outside T's range.
template <class T>
NumberStatus integer_from_text(std::string_view text, T& out);

// `text` as a double (strtod's forms: decimal, exponent, hexadecimal "0x1.8p+3", inf, nan), the
// whole text; out_of_range when it overflows to infinity (an underflow to 0 or a subnormal is ok).
NumberStatus number_from_text(std::string_view text, double& out);

// At most 40 characters of `text` as a quoted C-string-like literal, control bytes escaped, for an
// error message about it: "'1e99'", "'aaaaaaaa...' (1048576 bytes)".
std::string quote_excerpt(std::string_view text);

// `text` as an integer in [lo, hi]; else FormatError "what: expected an integer in [lo, hi], got
// 'text'" (`what` names the file and the key: "run.ckpt: metadata max_steps").
template <class T>
T parse_integer(const std::string& what, std::string_view text, T lo = std::numeric_limits<T>::lowest(),
                T hi = std::numeric_limits<T>::max());

// `text` as a number in [lo, hi] (NaN refused unless allow_nan); else FormatError naming `what`.
double parse_number(const std::string& what, std::string_view text,
                    double lo = -std::numeric_limits<double>::infinity(),
                    double hi = std::numeric_limits<double>::infinity(), bool allow_nan = false);

namespace detail {
// "a folder", "a character device", "a FIFO (named pipe)", ... for a file that is not a regular one.
const char* file_kind(mode_t mode);
}  // namespace detail

}  // namespace xgrad
