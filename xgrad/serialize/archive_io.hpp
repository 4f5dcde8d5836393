// Internal to serialize/*.cpp (not included by serialize.hpp): the cereal machinery of
// archive.hpp -- bounded input, fields, sequences, the header, whole archives. How each type is
// laid out is in archive_types.hpp.
//
// cereal trusts its input: its containers resize to whatever a length prefix says. So no cereal
// container header is used here. Every sequence is read with begin_seq, which checks the count
// it reads against the bytes that remain in the binary input before anything is allocated
// (cereal's JSON archive gets its counts from the parsed document, which the file bounds).
// Strings in binary archives go through the checked overloads below. Bools are read as
// a byte and checked (loading any other byte into a bool is undefined behaviour).
//
// The header has no class version: its layout {magic, format_version, kind} is fixed for ever.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <istream>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// cereal's json.hpp configures rapidjson before including it: assertions that throw (instead of
// assert(), which aborts, or nothing, which is undefined behaviour on a malformed file) and
// full-precision number parsing (else doubles can come back an ulp off). A rapidjson header
// included earlier would silently keep rapidjson's defaults.
#ifdef RAPIDJSON_RAPIDJSON_H_
#error "include serialize/archive_io.hpp before any rapidjson header"
#endif
// rapidjson 1.1.0 (Debian 12's) adds to the null pointer of an empty internal stack, which clang's
// UBSan reports (Tencent/rapidjson#1724, fixed upstream after 1.1.0): that one check is off in
// rapidjson's code, and only there.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((no_sanitize("pointer-overflow"))), apply_to = function)
#endif
#include <cereal/archives/json.hpp>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#if defined(__clang__)
#pragma clang attribute pop
#endif
#include <cereal/archives/portable_binary.hpp>
#include <cereal/cereal.hpp>

#include <xgrad/serialize/archive.hpp>

namespace xgrad::archive_io {

using BinaryOut = cereal::PortableBinaryOutputArchive;
using BinaryIn = cereal::PortableBinaryInputArchive;
using JsonOut = cereal::JSONOutputArchive;
using JsonIn = cereal::JSONInputArchive;

template <class A>
constexpr bool is_json = cereal::traits::is_text_archive<A>::value;

// Limits on what a file may claim, beyond what its size allows.
constexpr std::uint64_t kMaxRank = 64;
constexpr int kMaxSchedulerNesting = 16;  // SequentialLR inside SequentialLR ...
constexpr int kMaxJsonDepth = 64;

// ---- input with its bounds -----------------------------------------------------------------------

// Reads from bytes in memory; in_avail() is what remains.
class MemoryBuf : public std::streambuf {
 public:
  MemoryBuf(const char* data, std::size_t size) {
    char* p = const_cast<char*>(data);  // only ever read
    setg(p, p, p + size);
  }
};

// The binary input archive, knowing how many bytes remain and how deeply schedules nest.
class BinaryReader : public BinaryIn {
 public:
  BinaryReader(std::istream& in, MemoryBuf& buf)
      : BinaryIn(in, BinaryIn::Options::LittleEndian()), buf_(buf) {}
  std::uint64_t remaining() const { return static_cast<std::uint64_t>(buf_.in_avail()); }
  int depth = 0;

 private:
  MemoryBuf& buf_;
};

class JsonReader : public JsonIn {
 public:
  explicit JsonReader(std::istream& in) : JsonIn(in) {}
  int depth = 0;
};

// Throws FormatError unless `count` items of at least `min_bytes` bytes each fit in the rest of
// a binary input. (JSON counts are the parsed document's: nothing to check.)
void check_fits(BinaryIn& ar, std::uint64_t count, std::uint64_t min_bytes, const char* what);
inline void check_fits(JsonIn&, std::uint64_t, std::uint64_t, const char*) {}

int& nesting_depth(BinaryIn& ar);
int& nesting_depth(JsonIn& ar);

// Throws FormatError if a type's class version is newer than this build reads.
void check_version(std::uint32_t version, std::uint32_t newest, const char* type);

// UTF-8 without NUL, as a JSON string must be to come back unchanged; throws
// std::invalid_argument naming `what` otherwise.
void check_json_string(const std::string& s, const char* what);

// The product of a shape's dimensions, for allocation: throws FormatError if the rank exceeds
// kMaxRank or xgrad::checked_numel refuses the shape (its count overflows).
std::uint64_t checked_numel(const Shape& shape);

// The nearest float or double (|x| beyond the largest finite value becomes +-inf, by IEEE
// rounding, without the undefined behaviour of an out-of-range conversion).
template <class T>
T narrow(double x) {
  if constexpr (std::is_same_v<T, double>) {
    return x;
  } else {
    constexpr double limit = 0x1.ffffffp127;  // FLT_MAX plus half an ulp: rounds to inf
    if (x >= limit) return std::numeric_limits<float>::infinity();
    if (x <= -limit) return -std::numeric_limits<float>::infinity();
    return static_cast<float>(x);
  }
}

// ---- fields, nodes and sequences -----------------------------------------------------------------

template <class A, class V>
void field(A& ar, const char* name, V&& value) {
  ar(cereal::make_nvp(name, std::forward<V>(value)));
}

// Throws std::invalid_argument unless JSON can hold x (it has no NaN or infinity); `what` names it.
inline void check_json_number(const std::string& what, double x) {
  if (!std::isfinite(x))
    throw std::invalid_argument("cannot write '" + what + "' = " + std::to_string(x) +
                                " to JSON (it has no NaN or infinity); save in the binary format");
}

// A double that JSON can hold.
template <class A>
void save_number(A& ar, const char* name, double x) {
  if constexpr (is_json<A>) check_json_number(name != nullptr ? name : "a number", x);
  field(ar, name, x);
}

template <class A>
void save_string(A& ar, const char* name, const std::string& s) {
  if constexpr (is_json<A>) check_json_string(s, name);
  field(ar, name, s);
}

// A bool is a byte 0 or 1 in binary; anything else is malformed. `what` names it in the message
// (by default the field's name).
template <class A>
bool load_bool(A& ar, const char* name, const char* what = nullptr) {
  if constexpr (is_json<A>) {
    bool b = false;
    field(ar, name, b);
    return b;
  } else {
    std::uint8_t byte = 0;
    ar(byte);
    if (byte > 1)
      throw FormatError(std::string("'") + (what != nullptr ? what : name) + "' should be a bool, got the byte " +
                        std::to_string(byte));
    return byte == 1;
  }
}

// A named JSON object (unnamed inside a sequence); nothing in binary.
template <class A, class F>
void node(A& ar, const char* name, F&& body) {
  if constexpr (is_json<A>) {
    ar.setNextName(name);
    ar.startNode();
  }
  body();
  if constexpr (is_json<A>) ar.finishNode();
}

// A sequence of n items: a JSON array, or a u64 count and the items in binary.
template <class A, class F>
void save_seq(A& ar, const char* name, std::size_t n, F&& item) {
  if constexpr (is_json<A>) {
    ar.setNextName(name);
    ar.startNode();
  }
  ar(cereal::make_size_tag(static_cast<cereal::size_type>(n)));
  for (std::size_t i = 0; i < n; ++i) item(i);
  if constexpr (is_json<A>) ar.finishNode();
}

// Sequences whose count the caller checks before allocating: begin_seq returns the count
// (checked to fit with at least `min_bytes` per item); end_seq closes the JSON array.
template <class A>
std::uint64_t begin_seq(A& ar, const char* name, std::uint64_t min_bytes, const char* what) {
  if constexpr (is_json<A>) {
    ar.setNextName(name);
    ar.startNode();
  }
  cereal::size_type n = 0;
  ar(cereal::make_size_tag(n));
  check_fits(ar, n, min_bytes, what);
  return n;
}
template <class A>
void end_seq(A& ar) {
  if constexpr (is_json<A>) ar.finishNode();
}

// Reads a sequence's count, checked to fit with at least `min_bytes` per item, calls item(i, n)
// for each.
template <class A, class F>
void load_seq(A& ar, const char* name, std::uint64_t min_bytes, const char* what, F&& item) {
  const std::uint64_t n = begin_seq(ar, name, min_bytes, what);
  for (std::uint64_t i = 0; i < n; ++i) item(static_cast<std::size_t>(i), static_cast<std::size_t>(n));
  end_seq(ar);
}

// std::optional as a sequence of 0 or 1 items.
template <class A, class V, class F>
void save_optional(A& ar, const char* name, const std::optional<V>& v, F&& save_value) {
  save_seq(ar, name, v ? 1 : 0, [&](std::size_t) { save_value(*v); });
}
template <class A, class F>
void load_optional(A& ar, const char* name, F&& load_value) {
  load_seq(ar, name, 1, name, [&](std::size_t, std::size_t n) {
    if (n > 1) throw FormatError(std::string("'") + name + "' holds " + std::to_string(n) + " values; expected 0 or 1");
    load_value();
  });
}

template <class A>
void save_doubles(A& ar, const char* name, const std::vector<double>& v) {
  save_seq(ar, name, v.size(), [&](std::size_t i) { save_number(ar, nullptr, v[i]); });
}
template <class A>
void load_doubles(A& ar, const char* name, std::vector<double>& v) {
  v.clear();
  load_seq(ar, name, sizeof(double), name, [&](std::size_t, std::size_t) {
    double x = 0;
    ar(x);
    v.push_back(x);
  });
}

template <class A>
void save_strings(A& ar, const char* name, const std::vector<std::string>& v) {
  save_seq(ar, name, v.size(), [&](std::size_t i) { save_string(ar, nullptr, v[i]); });
}
template <class A>
void load_strings(A& ar, const char* name, std::vector<std::string>& v) {
  v.clear();
  load_seq(ar, name, sizeof(std::uint64_t), name, [&](std::size_t, std::size_t) {
    std::string s;
    ar(s);
    v.push_back(std::move(s));
  });
}

// Counts what nests (SequentialLR states) while it is being read.
class NestingGuard {
 public:
  NestingGuard(int& depth, int limit, const char* what) : depth_(depth) {
    if (++depth_ > limit)
      throw FormatError(std::string(what) + " nested more than " + std::to_string(limit) + " deep");
  }
  ~NestingGuard() { --depth_; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;

 private:
  int& depth_;
};

// A sequence of exactly n items.
template <class A, class F>
void load_fixed_seq(A& ar, const char* name, std::uint64_t n, const char* what, F&& item) {
  const std::uint64_t got = begin_seq(ar, name, 1, what);
  if (got != n) throw FormatError(std::string(what) + ": " + std::to_string(got) + " values; expected " + std::to_string(n));
  for (std::uint64_t i = 0; i < n; ++i) item(static_cast<std::size_t>(i));
  end_seq(ar);
}

// ---- whole archives ----------------------------------------------------------------------------

struct Header {
  std::string magic = kArchiveMagic;
  std::uint32_t format_version = kArchiveFormatVersion;
  std::string kind;  // "state_dict", "optimizer", "lr_scheduler", "generator", "checkpoint"
  std::string crc32;  // JSON, format 2 on: the text's CRC-32, 8 hex digits (see write_archive)
};

// CRC-32 (IEEE 802.3, as zip and zlib compute it) of `size` bytes.
std::uint32_t crc32(const char* data, std::size_t size);
// Format 2 on, a checksum covers every byte: a binary archive ends with the CRC-32 of all the
// bytes before it (4 bytes, little-endian); a JSON archive's header holds, as "crc32", the CRC-32
// of the whole text written with kJsonCrcPlaceholder in its place. The checks throw FormatError
// when it does not match (a truncated or corrupt file), and check_json_crc also when a format-1
// header holds a crc32 (a corrupted version number must not turn the check off).
constexpr const char* kJsonCrcPlaceholder = "00000000";
void append_binary_crc(std::string& bytes);
void check_binary_crc(const char* data, std::size_t size);
std::string json_with_crc(std::string text);
void check_json_crc(const char* data, std::size_t size, const Header& header);

// The first byte of a binary archive (cereal's endianness flag) must be 0 or 1; throws
// FormatError "not an xgrad archive" otherwise. A JSON text must be valid UTF-8 JSON, without NUL
// bytes, nesting at most kMaxJsonDepth deep (cereal's parser recurses); throws FormatError.
void check_binary_start(const char* data, std::size_t size);
void check_json_text(const char* data, std::size_t size);
// Throws FormatError unless the header is this format's, of a version this build reads, for
// content of this kind.
void check_header(const Header& header, const char* kind);
std::string kind_description(const std::string& kind);

// What a parser's exception says about a file: cereal's "Failed to read 8 bytes from input
// stream! Read 7" becomes "the file is truncated (...)".
std::string reason_of(const std::exception& e);
// Whether the bytes begin as a binary archive's header does (the endianness flag, the magic's
// length and as much of "xgrad" as there is).
bool starts_like_a_header(const char* data, std::size_t size);

// The whole file (std::runtime_error naming `who` and the path if it cannot be read).
std::string read_file(const char* who, const std::string& path);

}  // namespace xgrad::archive_io

// cereal finds these by the archive's namespace.
namespace cereal {

// Strings in binary archives: a u64 length, checked against the bytes left, then the bytes.
inline void CEREAL_SAVE_FUNCTION_NAME(PortableBinaryOutputArchive& ar, const std::string& s) {
  ar(make_size_tag(static_cast<size_type>(s.size())));
  ar(binary_data(s.data(), s.size()));
}
inline void CEREAL_LOAD_FUNCTION_NAME(PortableBinaryInputArchive& ar, std::string& s) {
  size_type n = 0;
  ar(make_size_tag(n));
  xgrad::archive_io::check_fits(ar, n, 1, "a string");
  s.resize(static_cast<std::size_t>(n));
  ar(binary_data(s.data(), static_cast<std::size_t>(n)));
}

template <class A>
void CEREAL_SAVE_FUNCTION_NAME(A& ar, const xgrad::archive_io::Header& h) {
  xgrad::archive_io::save_string(ar, "magic", h.magic);
  xgrad::archive_io::field(ar, "format_version", h.format_version);
  xgrad::archive_io::save_string(ar, "kind", h.kind);
  if constexpr (xgrad::archive_io::is_json<A>)
    if (h.format_version >= 2) xgrad::archive_io::save_string(ar, "crc32", h.crc32);
}
template <class A>
void CEREAL_LOAD_FUNCTION_NAME(A& ar, xgrad::archive_io::Header& h) {
  xgrad::archive_io::field(ar, "magic", h.magic);
  xgrad::archive_io::field(ar, "format_version", h.format_version);
  xgrad::archive_io::field(ar, "kind", h.kind);
  if constexpr (xgrad::archive_io::is_json<A>)
    if (h.format_version >= 2) xgrad::archive_io::field(ar, "crc32", h.crc32);
}

}  // namespace cereal

namespace xgrad::archive_io {

// Writes the header, then payload(archive) in the format; the JSON text ends with a newline.
template <class F>
void write_archive(std::ostream& out, ArchiveFormat format, const char* kind, F&& payload) {
  Header header;
  header.kind = kind;
  std::ostringstream text(std::ios::binary);  // the checksum covers it all: written once complete
  if (format == ArchiveFormat::binary) {
    {
      BinaryOut ar(text, BinaryOut::Options::LittleEndian());
      ar(header);
      payload(ar);
    }
    std::string bytes = std::move(text).str();
    append_binary_crc(bytes);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  } else {
    header.crc32 = kJsonCrcPlaceholder;
    {
      // Shortest decimals that read back exactly; two-space indent.
      JsonOut ar(text, JsonOut::Options(rapidjson::Writer<rapidjson::OStreamWrapper>::kDefaultMaxDecimalPlaces,
                                        JsonOut::Options::IndentChar::space, 2));
      field(ar, "header", header);
      payload(ar);
    }  // the archive closes the root object when it goes out of scope
    text << '\n';
    out << json_with_crc(std::move(text).str());
  }
}

// Reads an archive of `kind` from bytes: checks the header, calls payload(archive), and checks
// that nothing follows. Every failure becomes FormatError "<who>: '<name>': <reason>".
template <class F>
void read_archive(const char* who, const std::string& name, const char* data, std::size_t size,
                  ArchiveFormat format, const char* kind, F&& payload) {
  const std::string prefix = std::string(who) + ": '" + name + "': ";
  try {
    MemoryBuf buf(data, size);
    std::istream in(&buf);
    if (format == ArchiveFormat::binary) {
      check_binary_start(data, size);
      Header header;
      try {
        BinaryReader ar(in, buf);
        ar(header);
      } catch (const std::exception& e) {
        // Cut short inside a header that starts as xgrad's does: truncated, not foreign.
        const std::string reason = reason_of(e);
        throw FormatError(starts_like_a_header(data, size) ? "the file is truncated (" + std::string(e.what()) + ")"
                                                           : "not an xgrad archive (" + reason + ")");
      }
      check_header(header, kind);
      if (header.format_version >= 2) {
        check_binary_crc(data, size);
        size -= 4;
      }
      MemoryBuf body(data, size);  // read again from the start, without the checksum
      std::istream body_in(&body);
      BinaryReader ar(body_in, body);
      ar(header);
      payload(static_cast<BinaryIn&>(ar));
      if (ar.remaining() != 0)
        throw FormatError(std::to_string(ar.remaining()) + " unexpected bytes after the end of the archive");
    } else {
      check_json_text(data, size);
      JsonReader ar(in);
      Header header;
      try {
        field(ar, "header", header);
      } catch (const std::exception& e) {
        throw FormatError(std::string("not an xgrad archive (") + e.what() + ")");
      }
      check_header(header, kind);
      check_json_crc(data, size, header);
      payload(static_cast<JsonIn&>(ar));
    }
  } catch (const FormatError& e) {
    throw FormatError(prefix + e.what());
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw FormatError(prefix + reason_of(e));
  }
}

}  // namespace xgrad::archive_io
