// Module, optimizer, schedule and generator archives (archive.hpp) over the cereal layer of
// archive_io.hpp; the checks every load shares.
#include <xgrad/serialize/archive.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <xgrad/serialize/archive_types.hpp>  // also cereal's JSON archive and the rapidjson it configures
#include <xgrad/serialize/atomic_file.hpp>

namespace xgrad {

namespace archive_io {

void check_fits(BinaryIn& ar, std::uint64_t count, std::uint64_t min_bytes, const char* what) {
  const std::uint64_t remaining = dynamic_cast<BinaryReader&>(ar).remaining();
  if (min_bytes != 0 && count > remaining / min_bytes)
    throw FormatError(std::string(what) + " claims " + std::to_string(count) + " items of at least " +
                      std::to_string(min_bytes) + " bytes, but only " + std::to_string(remaining) +
                      " bytes remain in the file");
}

int& nesting_depth(BinaryIn& ar) { return dynamic_cast<BinaryReader&>(ar).depth; }
int& nesting_depth(JsonIn& ar) { return dynamic_cast<JsonReader&>(ar).depth; }

void check_version(std::uint32_t version, std::uint32_t newest, const char* type) {
  if (version > newest)
    throw FormatError(std::string("the ") + type + " was written with class version " + std::to_string(version) +
                      ", this build reads up to " + std::to_string(newest));
}

namespace {

// The length of the UTF-8 sequence starting at s[i] (0 if invalid): no overlong forms, no
// surrogates, nothing above U+10FFFF.
std::size_t utf8_sequence(const std::string& s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned min_second = 0x80, max_second = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) min_second = 0xA0;
    if (c == 0xED) max_second = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) min_second = 0x90;
    if (c == 0xF4) max_second = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < min_second || byte(i + 1) > max_second) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

// Walks a JSON text with rapidjson's iterative parser (no recursion) before cereal parses it
// recursively: counts the nesting, and sees every number as written.
struct JsonScreen : rapidjson::BaseReaderHandler<rapidjson::UTF8<>, JsonScreen> {
  int depth = 0;
  bool too_deep = false;
  std::string bad_number, why;  // a number refused, and the reason

  bool open() {
    too_deep = ++depth > kMaxJsonDepth;
    return !too_deep;
  }
  bool close() {
    --depth;
    return true;
  }
  bool StartObject() { return open(); }
  bool EndObject(rapidjson::SizeType) { return close(); }
  bool StartArray() { return open(); }
  bool EndArray(rapidjson::SizeType) { return close(); }

  // rapidjson 1.1.0's full-precision path (which cereal uses) misbehaves on some numbers that
  // xgrad never writes: a zero significand scaled by 10^p, |p| > 22 ("0e300"), or significant
  // digits 18446744073709551615 then one >= 5 (its 64-bit significand rounds up to 0), reach the
  // undefined __builtin_clzll(0); a magnitude beyond double's range ("1" and 330 zeros, or
  // "1e-400") indexes past its table of powers of ten. Those, and overlong numbers, are refused.
  bool RawNumber(const char* text, rapidjson::SizeType length, bool) {
    const std::string number(text, length);
    std::size_t i = number[0] == '-' ? 1 : 0;
    if (i < number.size() && (number[i] == 'N' || number[i] == 'I')) return true;  // NaN, Infinity
    auto refuse = [&](const char* reason) {
      bad_number = number.size() > 40 ? number.substr(0, 40) + "..." : number;
      why = reason;
      return false;
    };
    if (number.size() > 64) return refuse("longer than 64 characters");
    long integer_digits = 0, fraction_digits = 0, first_nonzero = -1, exponent = 0;  // digit positions
    bool fraction = false;
    std::string digits;  // significant digits, leading zeros dropped
    for (; i < number.size() && number[i] != 'e' && number[i] != 'E'; ++i) {
      if (number[i] == '.') {
        fraction = true;
        continue;
      }
      if (number[i] != '0' && first_nonzero < 0) first_nonzero = integer_digits + fraction_digits;
      if (first_nonzero >= 0) digits += number[i];
      ++(fraction ? fraction_digits : integer_digits);
    }
    const std::string wraps = "18446744073709551615";  // 2^64 - 1
    if (digits.size() > wraps.size() && digits.compare(0, wraps.size(), wraps) == 0 && digits[wraps.size()] >= '5')
      return refuse("its significand overflows rapidjson 1.1.0's 64 bits");
    if (i < number.size()) {
      const bool minus = i + 1 < number.size() && number[i + 1] == '-';
      for (std::size_t k = i + 1; k < number.size(); ++k)
        if (std::isdigit(static_cast<unsigned char>(number[k])))
          exponent = std::min(exponent * 10 + (number[k] - '0'), 1000000L);  // clamped: far beyond any limit
      if (minus) exponent = -exponent;
    }
    if (first_nonzero < 0) {  // zero: significand * 10^p
      const long p = exponent - fraction_digits;
      return p < -22 || p > 22 ? refuse("a zero with an exponent beyond +-22") : true;
    }
    // The value lies in [10^(m-1), 10^m); doubles span m = -323 (4.9e-324) to 309 (1.8e308).
    const long m = integer_digits - first_nonzero + exponent;
    return m < -323 || m > 309 ? refuse("beyond the range of double") : true;
  }
};

}  // namespace

void check_json_string(const std::string& s, const char* what) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = s[i] == '\0' ? 0 : utf8_sequence(s, i);
    if (n == 0)
      throw std::invalid_argument(std::string("cannot write ") + (what ? what : "a string") +
                                  " to JSON: it holds a NUL or is not valid UTF-8 at byte " + std::to_string(i) +
                                  "; save in the binary format");
    i += n;
  }
}

std::uint64_t checked_numel(const Shape& shape) {
  if (shape.size() > kMaxRank)
    throw FormatError("a tensor of " + std::to_string(shape.size()) + " dimensions (at most " +
                      std::to_string(kMaxRank) + ")");
  try {
    // Bytes per element 1: the data's byte size is bounded by the file's (check_fits) before
    // anything is allocated.
    return xgrad::checked_numel(shape, 1, "");
  } catch (const std::invalid_argument& e) {
    throw FormatError(std::string(e.what()).substr(2));  // without the empty "who: "
  }
}

void check_binary_start(const char* data, std::size_t size) {
  if (size == 0) throw FormatError("not an xgrad archive (the file is empty)");
  const unsigned char first = static_cast<unsigned char>(data[0]);
  if (first > 1) {
    std::size_t i = 0;
    while (i < size && std::isspace(static_cast<unsigned char>(data[i]))) ++i;
    const bool json = i < size && data[i] == '{';
    throw FormatError(std::string("not an xgrad archive") +
                      (json ? " (it looks like JSON: JSON archives are read from paths ending in \".json\")" : ""));
  }
}

void check_json_text(const char* data, std::size_t size) {
  if (std::memchr(data, '\0', size) != nullptr) throw FormatError("not an xgrad archive (a NUL byte in JSON text)");
  rapidjson::MemoryStream stream(data, size);
  rapidjson::Reader reader;
  JsonScreen screen;
  constexpr unsigned flags = rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag |
                             rapidjson::kParseNanAndInfFlag | rapidjson::kParseNumbersAsStringsFlag;
  const rapidjson::ParseResult result = reader.Parse<flags>(stream, screen);
  if (screen.too_deep)
    throw FormatError("JSON nested more than " + std::to_string(kMaxJsonDepth) + " deep at byte " +
                      std::to_string(result.Offset()));
  if (!screen.bad_number.empty())
    throw FormatError("unsupported number " + screen.bad_number + " near byte " + std::to_string(result.Offset()) +
                      ": " + screen.why);
  if (result.IsError())
    throw FormatError(std::string("not an xgrad archive (invalid JSON at byte ") + std::to_string(result.Offset()) +
                      ": " + rapidjson::GetParseError_En(result.Code()) + ")");
}

std::string kind_description(const std::string& kind) {
  if (kind == "state_dict") return "a module's state dict";
  if (kind == "optimizer") return "an optimizer's state";
  if (kind == "lr_scheduler") return "a learning-rate schedule's state";
  if (kind == "generator") return "a random generator's state";
  if (kind == "checkpoint") return "a checkpoint";
  return "'" + kind + "'";
}

std::uint32_t crc32(const char* data, std::size_t size) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ static_cast<unsigned char>(data[i])) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

namespace {

std::string hex8(std::uint32_t v) {
  char s[9];
  std::snprintf(s, sizeof s, "%08x", v);
  return s;
}

FormatError crc_mismatch(std::uint32_t computed, const std::string& stored) {
  return FormatError("the file is truncated or corrupt: its checksum is " + hex8(computed) + ", the file says " +
                     stored);
}

// Where the JSON text holds the header's crc32 value: the first "crc32" string (the header comes
// first), or npos.
std::size_t json_crc_position(const std::string& text) {
  const std::string key = "\"crc32\": \"";
  const std::size_t at = text.find(key);
  return at == std::string::npos || at + key.size() + 8 > text.size() ? std::string::npos : at + key.size();
}

}  // namespace

void append_binary_crc(std::string& bytes) {
  const std::uint32_t c = crc32(bytes.data(), bytes.size());
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((c >> (8 * i)) & 0xFF));
}

void check_binary_crc(const char* data, std::size_t size) {
  if (size < 5) throw FormatError("the file is truncated (no room for its checksum)");
  std::uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) stored |= std::uint32_t(static_cast<unsigned char>(data[size - 4 + i])) << (8 * i);
  const std::uint32_t computed = crc32(data, size - 4);
  if (computed != stored) throw crc_mismatch(computed, hex8(stored));
}

std::string json_with_crc(std::string text) {
  const std::size_t at = json_crc_position(text);
  XGRAD_CHECK(at != std::string::npos && text.compare(at, 8, kJsonCrcPlaceholder) == 0,
              "write_archive: no crc32 placeholder in the JSON header");
  text.replace(at, 8, hex8(crc32(text.data(), text.size())));
  return text;
}

void check_json_crc(const char* data, std::size_t size, const Header& header) {
  std::string text(data, size);
  const std::size_t at = json_crc_position(text);
  if (header.format_version < 2) {
    // The header holds no object: its end is the first '}'.
    if (at != std::string::npos && at < text.find('}'))
      throw FormatError("a format 1 header with a crc32: the file is corrupt");
    return;
  }
  const std::string& crc = header.crc32;
  if (at == std::string::npos || text.compare(at, 8, crc) != 0 || crc.size() != 8)
    throw FormatError("the header's crc32 (\"" + crc + "\") is not where a writer puts it: the file is corrupt");
  text.replace(at, 8, kJsonCrcPlaceholder);
  const std::uint32_t computed = crc32(text.data(), text.size());
  if (hex8(computed) != crc) throw crc_mismatch(computed, crc);
}

bool starts_like_a_header(const char* data, std::size_t size) {
  std::string start(1, '\1');
  start += std::string("\5\0\0\0\0\0\0\0", 8) + kArchiveMagic;
  const std::size_t n = std::min(size, start.size());
  return n > 0 && static_cast<unsigned char>(data[0]) <= 1 && std::memcmp(data + 1, start.data() + 1, n - 1) == 0;
}

std::string reason_of(const std::exception& e) {
  const std::string what = e.what();
  if (what.rfind("Failed to read ", 0) == 0)  // cereal: "Failed to read N bytes from input stream! Read M"
    return "the file is truncated (" + what + ")";
  return what;
}

void check_header(const Header& header, const char* kind) {
  if (header.magic != kArchiveMagic) throw FormatError("not an xgrad archive (no \"xgrad\" magic)");
  if (header.format_version == 0) throw FormatError("invalid format version 0");
  if (header.format_version > kArchiveFormatVersion)
    throw FormatError("written by a newer format version " + std::to_string(header.format_version) +
                      ", this build reads up to " + std::to_string(kArchiveFormatVersion));
  if (header.kind != kind)
    throw FormatError("the file holds " + kind_description(header.kind) + ", not " + kind_description(kind));
}

template <class T>
void check_optimizer_state(const OptimizerState<T>& s) {
  std::unordered_set<std::string> params;
  for (const auto& group : s.param_groups)
    for (const auto& name : group.params)
      if (!params.insert(name).second) throw FormatError("the parameter '" + name + "' appears twice in the groups");
  std::unordered_set<std::string> with_state;
  for (const auto& [name, state] : s.state) {
    if (!params.count(name)) throw FormatError("state for '" + name + "', which is in no parameter group");
    if (!with_state.insert(name).second) throw FormatError("two states for the parameter '" + name + "'");
  }
}

template void check_optimizer_state<float>(const OptimizerState<float>&);
template void check_optimizer_state<double>(const OptimizerState<double>&);

std::string read_file(const char* who, const std::string& path) { return read_regular_file(who, path); }

}  // namespace archive_io

using archive_io::read_archive;
using archive_io::write_archive;

ArchiveFormat archive_format(const std::string& path) {
  const std::string ext = ".json";
  const bool json = path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  return json ? ArchiveFormat::json : ArchiveFormat::binary;
}

namespace {

// Saves `value` under `kind` at `path` atomically, in the format the path names.
template <class V>
void save_value(const std::string& path, const char* kind, const V& value) {
  write_file_atomically(path, [&](std::ostream& out) {
    write_archive(out, archive_format(path), kind, [&](auto& ar) { archive_io::field(ar, kind, value); });
  });
}

template <class V>
void load_value(const char* who, const std::string& name, const char* data, std::size_t size, ArchiveFormat format,
                const char* kind, V& value) {
  read_archive(who, name, data, size, format, kind, [&](auto& ar) { archive_io::field(ar, kind, value); });
}

template <class V>
V load_file(const char* who, const std::string& path, const char* kind) {
  const std::string bytes = archive_io::read_file(who, path);
  V value{};
  load_value(who, path, bytes.data(), bytes.size(), archive_format(path), kind, value);
  return value;
}

// Rethrows a mismatch between a file and the object it is loaded into, naming the file.
template <class F>
auto naming_file(const char* who, const std::string& path, F&& f) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(who) + ": '" + path + "': " + e.what());
  }
}

}  // namespace

// ---- module state ------------------------------------------------------------------------------

template <class T>
void save(const nn::StateDict<T>& state, const std::string& path) {
  save_value(path, "state_dict", state);
}

template <class T>
void save(const nn::Module<T>& module, const std::string& path) {
  save(module.state_dict(), path);
}

template <class T>
nn::StateDict<T> load_state_dict(const std::string& path) {
  return load_file<nn::StateDict<T>>("load_state_dict", path, "state_dict");
}

template <class T>
nn::LoadStateDictResult load(nn::Module<T>& module, const std::string& path, bool strict) {
  const nn::StateDict<T> state = load_file<nn::StateDict<T>>("load", path, "state_dict");
  return naming_file("load", path, [&] { return module.load_state_dict(state, strict); });
}

template <class T>
void write_state_dict(std::ostream& out, const nn::StateDict<T>& state, ArchiveFormat format) {
  write_archive(out, format, "state_dict", [&](auto& ar) { archive_io::field(ar, "state_dict", state); });
}

template <class T>
std::string state_dict_bytes(const nn::StateDict<T>& state, ArchiveFormat format) {
  std::ostringstream out(std::ios::binary);
  write_state_dict(out, state, format);
  return std::move(out).str();
}

template <class T>
nn::StateDict<T> load_state_dict_from_memory(const void* data, std::size_t size, ArchiveFormat format,
                                             const std::string& name) {
  nn::StateDict<T> state;
  load_value("load_state_dict", name, static_cast<const char*>(data), size, format, "state_dict", state);
  return state;
}

// ---- optimizer state -----------------------------------------------------------------------------

template <class T>
std::vector<std::string> parameter_names(const optim::Optimizer<T>& optimizer, const nn::Module<T>& module) {
  std::unordered_map<const Node<T>*, std::string> names;
  for (const auto& [name, p] : module.named_parameters()) names.emplace(p.node().get(), name);
  std::vector<std::string> result;
  const auto params = optimizer.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto it = names.find(params[i].node().get());
    XGRAD_CHECK(it != names.end(), "parameter_names: parameter ", i, " of the ", optimizer.name(),
                " optimizer (shape ", params[i].shape(), ") is not a parameter of the ", module.name(), " module");
    result.push_back(it->second);
  }
  return result;
}

namespace {

// names[i] names optimizer.parameters()[i]; checks there is one each and no two alike.
template <class T>
void check_names(const optim::Optimizer<T>& optimizer, const std::vector<std::string>& names, const char* who) {
  const std::size_t n = optimizer.parameters().size();
  XGRAD_CHECK(names.size() == n, who, ": expected one name for each of the ", n, " parameters of the ",
              optimizer.name(), " optimizer, got ", names.size());
  std::unordered_set<std::string> seen;
  for (const auto& name : names) XGRAD_CHECK(seen.insert(name).second, who, ": the name '", name, "' is given twice");
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "\"" : ", \"") + n + "\"";
  return s;
}

}  // namespace

template <class T>
OptimizerState<T> optimizer_state_dict(const optim::Optimizer<T>& optimizer, const std::vector<std::string>& names) {
  check_names(optimizer, names, "optimizer_state_dict");
  OptimizerState<T> s;
  s.optimizer = optimizer.name();
  const std::vector<optim::ParamState<T>> states = optimizer.state();
  std::size_t k = 0;
  for (const auto& group : optimizer.param_groups()) {
    typename OptimizerState<T>::Group g;
    g.options = std::shared_ptr<const optim::OptimizerOptions>(group.options().clone());
    g.initial_lr = group.initial_lr;
    for (std::size_t i = 0; i < group.params().size(); ++i, ++k) {
      g.params.push_back(names[k]);
      if (!states[k].empty()) s.state.emplace_back(names[k], states[k]);
    }
    s.param_groups.push_back(std::move(g));
  }
  return s;
}

template <class T>
void load_optimizer_state_dict(optim::Optimizer<T>& optimizer, const OptimizerState<T>& state,
                               const std::vector<std::string>& names) {
  const char* who = "load_optimizer_state_dict";
  check_names(optimizer, names, who);
  XGRAD_CHECK(state.optimizer == optimizer.name(), who, ": the state is of a ", state.optimizer,
              " optimizer, this optimizer is ", optimizer.name());
  auto& groups = optimizer.param_groups();
  XGRAD_CHECK(state.param_groups.size() == groups.size(), who, ": the state has ", state.param_groups.size(),
              " parameter groups, the optimizer has ", groups.size());

  std::unordered_map<std::string, std::size_t> index;  // name -> position in parameters()
  for (std::size_t i = 0; i < names.size(); ++i) index.emplace(names[i], i);
  std::size_t first = 0;
  std::vector<std::unique_ptr<optim::OptimizerOptions>> options;  // each group's, as the optimizer's own type
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& saved = state.param_groups[g];
    XGRAD_CHECK(saved.options != nullptr && std::string(saved.options->optimizer_name()) == optimizer.name(), who,
                ": parameter group ", g, " of the state has no ", optimizer.name(), " options");
    options.push_back(optimizer.defaults().clone());
    try {
      options.back()->set_values(saved.options->values());
      options.back()->validate();
    } catch (const std::invalid_argument& e) {
      XGRAD_CHECK(false, who, ": the options of parameter group ", g, " of the state: ", e.what());
    }
    const std::size_t count = groups[g].params().size();
    std::unordered_set<std::string> own(names.begin() + first, names.begin() + first + count);
    std::vector<std::string> missing, unexpected;
    for (const auto& name : saved.params)
      if (!own.erase(name)) unexpected.push_back(name);
    for (std::size_t i = first; i < first + count; ++i)
      if (own.count(names[i])) missing.push_back(names[i]);
    XGRAD_CHECK(missing.empty() && unexpected.empty(), who, ": parameter group ", g, " differs from the state's:",
                missing.empty() ? "" : " missing from the state: ", join(missing),
                unexpected.empty() ? "" : "; in the state, not in the group: ", join(unexpected));
    first += count;
  }

  std::vector<optim::ParamState<T>> states(names.size());
  for (const auto& [name, s] : state.state) {
    auto it = index.find(name);
    XGRAD_CHECK(it != index.end(), who, ": the state has an entry for '", name, "', which the optimizer does not hold");
    states[it->second] = s;
  }
  optimizer.set_state(states);  // checks every shape before changing anything
  for (std::size_t g = 0; g < groups.size(); ++g) {
    groups[g].set_options(*options[g]);
    groups[g].initial_lr = state.param_groups[g].initial_lr;
  }
}

template <class T>
void save(const OptimizerState<T>& state, const std::string& path) {
  save_value(path, "optimizer", state);
}

template <class T>
void save(const optim::Optimizer<T>& optimizer, const std::string& path, const std::vector<std::string>& names) {
  save(optimizer_state_dict(optimizer, names), path);
}

template <class T>
OptimizerState<T> load_optimizer_state(const std::string& path) {
  return load_file<OptimizerState<T>>("load_optimizer_state", path, "optimizer");
}

template <class T>
void load(optim::Optimizer<T>& optimizer, const std::string& path, const std::vector<std::string>& names) {
  const OptimizerState<T> state = load_file<OptimizerState<T>>("load", path, "optimizer");
  naming_file("load", path, [&] { load_optimizer_state_dict(optimizer, state, names); });
}

// ---- learning-rate schedule and generator ------------------------------------------------------

void save(const optim::LRSchedulerState& state, const std::string& path) { save_value(path, "lr_scheduler", state); }

template <class T>
void save(const optim::LRScheduler<T>& scheduler, const std::string& path) {
  save(scheduler.state(), path);
}

optim::LRSchedulerState load_lr_scheduler_state(const std::string& path) {
  return load_file<optim::LRSchedulerState>("load_lr_scheduler_state", path, "lr_scheduler");
}

template <class T>
void load(optim::LRScheduler<T>& scheduler, const std::string& path) {
  const auto state = load_file<optim::LRSchedulerState>("load", path, "lr_scheduler");
  naming_file("load", path, [&] { scheduler.load_state(state); });
}

void save(const Generator& generator, const std::string& path) { save_value(path, "generator", generator.get_state()); }

void load(Generator& generator, const std::string& path) {
  generator.set_state(load_file<GeneratorState>("load", path, "generator"));
}

#define XGRAD_INSTANTIATE(T)                                                                                       \
  template void save<T>(const nn::StateDict<T>&, const std::string&);                                             \
  template void save<T>(const nn::Module<T>&, const std::string&);                                                \
  template nn::StateDict<T> load_state_dict<T>(const std::string&);                                               \
  template nn::LoadStateDictResult load<T>(nn::Module<T>&, const std::string&, bool);                            \
  template void write_state_dict<T>(std::ostream&, const nn::StateDict<T>&, ArchiveFormat);                        \
  template std::string state_dict_bytes<T>(const nn::StateDict<T>&, ArchiveFormat);                                \
  template nn::StateDict<T> load_state_dict_from_memory<T>(const void*, std::size_t, ArchiveFormat,               \
                                                           const std::string&);                                   \
  template std::vector<std::string> parameter_names<T>(const optim::Optimizer<T>&, const nn::Module<T>&);         \
  template OptimizerState<T> optimizer_state_dict<T>(const optim::Optimizer<T>&, const std::vector<std::string>&); \
  template void load_optimizer_state_dict<T>(optim::Optimizer<T>&, const OptimizerState<T>&,                      \
                                             const std::vector<std::string>&);                                    \
  template void save<T>(const OptimizerState<T>&, const std::string&);                                            \
  template void save<T>(const optim::Optimizer<T>&, const std::string&, const std::vector<std::string>&);         \
  template OptimizerState<T> load_optimizer_state<T>(const std::string&);                                         \
  template void load<T>(optim::Optimizer<T>&, const std::string&, const std::vector<std::string>&);               \
  template void save<T>(const optim::LRScheduler<T>&, const std::string&);                                        \
  template void load<T>(optim::LRScheduler<T>&, const std::string&);

XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
