// safetensors reading and writing. A file is trusted for nothing: the header length is checked
// against the limit and the file size, the header against the format, and every tensor's byte
// range against its shape and the data buffer, all before the first tensor is allocated.
#include <xgrad/serialize/safetensors.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/base/json_input.hpp>
#include <xgrad/serialize/atomic_file.hpp>

namespace xgrad {

namespace {

using json = nlohmann::json;

// Every dtype of the format, with its size in bytes.
struct DtypeInfo {
  const char* name;
  std::size_t itemsize;
};
constexpr DtypeInfo kDtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                                 {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                                 {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};

const DtypeInfo* find_dtype(const std::string& name) {
  for (const DtypeInfo& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// Nesting deeper than this cannot be a safetensors header (it needs 3 levels); refusing it
// early bounds the parser's work on hostile input.
constexpr int kMaxHeaderDepth = 16;
// At most 64 dims per tensor, as PyTorch and xgrad's archives; checked while the header is
// parsed, before a forged shape of millions of dims is built.
constexpr std::size_t kMaxDims = 64;

template <class... Args>
[[noreturn]] void malformed(const std::string& where, const Args&... args) {
  throw FormatError(detail::concat("safetensors: '", where, "': ", args...));
}

// A string as a JSON literal: quoted, with control characters escaped. `s` must be UTF-8.
std::string quote(const std::string& s) { return json(s).dump(); }

// A JSON value for an error message, in a few words (never dumped whole: the input layer's rule).
std::string excerpt(const json& v) { return describe_json(v); }

// The offset of the first byte that does not begin a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or npos.
std::size_t invalid_utf8_offset(std::string_view s) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (n - i < len) return i;
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return i;
    for (std::size_t k = 2; k < len; ++k) {
      const auto ck = static_cast<unsigned char>(s[i + k]);
      if (ck < 0x80 || ck > 0xBF) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// ---- little-endian scalars and the 16-bit float formats --------------------------------------

std::uint64_t load_le(const unsigned char* p, std::size_t bytes) {
  std::uint64_t v = 0;
  for (std::size_t i = bytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

void store_le(unsigned char* p, std::uint64_t v, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i, v >>= 8) p[i] = static_cast<unsigned char>(v & 0xFF);
}

float float_from_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1F;
  const std::uint32_t mantissa = h & 0x3FF;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) return float_from_bits(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
  return float_from_bits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

// bfloat16: the upper half of a binary32.
float bfloat16_to_float(std::uint16_t b) { return float_from_bits(static_cast<std::uint32_t>(b) << 16); }

// Round-to-nearest double -> T, giving +-inf where the value is beyond T's range (a plain cast
// of such a value is undefined behaviour in C++).
template <class T>
T narrow(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    // float's overflow threshold: FLT_MAX plus half an ulp rounds (to even) to infinity.
    const double threshold = std::ldexp(2.0 - std::ldexp(1.0, -24), 127);
    if (std::abs(v) >= threshold)
      return v > 0 ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity();
    return static_cast<T>(v);
  }
}

// ---- the header --------------------------------------------------------------------------

// Checks the 8-byte length N against the limit and the file; `file_size` includes the 8 bytes.
void check_header_length(const std::string& where, std::uint64_t n, std::uint64_t file_size) {
  if (n > kSafetensorsMaxHeaderSize)
    malformed(where, "header length ", n, " exceeds the limit of ", kSafetensorsMaxHeaderSize, " bytes");
  if (n > file_size - 8)
    malformed(where, "header length ", n, " exceeds the ", file_size - 8, " bytes left in the file");
}

void check_file_size(const std::string& where, std::uint64_t file_size) {
  if (file_size < 8)
    malformed(where, "the file is ", file_size, " bytes long, shorter than the 8-byte header length");
}

std::uint64_t checked_uint(const std::string& where, const std::string& entry, const char* what,
                           const json& x) {
  if (x.is_number_unsigned()) return x.get<std::uint64_t>();
  if (x.is_number_integer()) {
    const auto v = x.get<std::int64_t>();
    if (v < 0) malformed(where, "entry ", entry, ": negative ", what, " ", v);
    return static_cast<std::uint64_t>(v);  // "-0"
  }
  malformed(where, "entry ", entry, ": ", what, " ", excerpt(x), " is not an integer in [0, 2^64)");
}

SafetensorsEntry parse_entry(const std::string& where, const std::string& name, const json& v) {
  const std::string q = quote(name);
  if (!v.is_object()) malformed(where, "entry ", q, " is not an object (it is ", v.type_name(), ")");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) malformed(where, "entry ", q, " lacks the field \"", field, "\"");

  SafetensorsEntry e;
  e.name = name;
  const json& dtype = v.at("dtype");
  if (!dtype.is_string())
    malformed(where, "entry ", q, ": dtype is not a string (it is ", dtype.type_name(), ")");
  e.dtype = dtype.get<std::string>();
  const DtypeInfo* info = find_dtype(e.dtype);
  if (info == nullptr) malformed(where, "entry ", q, ": unknown dtype ", quote(e.dtype));

  const json& shape = v.at("shape");
  if (!shape.is_array())
    malformed(where, "entry ", q, ": shape is not an array (it is ", shape.type_name(), ")");
  for (const json& d : shape) e.shape.push_back(checked_uint(where, q, "shape dimension", d));

  const json& offsets = v.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2)
    malformed(where, "entry ", q, ": data_offsets is not an array [begin, end] (it is ", excerpt(offsets),
              ")");
  e.begin = checked_uint(where, q, "data offset", offsets[0]);
  e.end = checked_uint(where, q, "data offset", offsets[1]);
  if (e.end < e.begin)
    malformed(where, "entry ", q, ": data_offsets [", e.begin, ", ", e.end,
              "] are inverted (end before begin)");

  // Elements = prod(shape). The product of the non-zero dims must also fit, even for an empty
  // tensor: xtensor computes strides from it (as signed integers).
  std::uint64_t count = 0;
  try {
    count = checked_numel(e.shape, info->itemsize, "safetensors");
  } catch (const std::invalid_argument&) {
    malformed(where, "entry ", q, ": shape ", e.shape, " overflows: its element count or byte size exceeds 2^63");
  }
  const std::uint64_t bytes = count * info->itemsize;
  if (e.end - e.begin != bytes)
    malformed(where, "entry ", q, ": data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin,
              " bytes but shape ", e.shape, " of ", e.dtype, " needs ", bytes);
  return e;
}

SafetensorsMetadata parse_metadata(const std::string& where, const json& v) {
  if (!v.is_object()) malformed(where, "__metadata__ is not an object (it is ", v.type_name(), ")");
  SafetensorsMetadata metadata;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string())
      malformed(where, "__metadata__ value of ", quote(key), " is not a string (it is ", value.type_name(),
                ")");
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

// The tensors must tile the data buffer exactly: from byte 0, in order of offsets, each
// starting where the previous one ended, the last ending at the buffer's end.
void check_layout(const std::string& where, const std::vector<SafetensorsEntry>& tensors,
                  std::uint64_t data_size) {
  std::vector<const SafetensorsEntry*> order;
  for (const auto& e : tensors) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t position = 0;
  const SafetensorsEntry* previous = nullptr;  // the tensor that ends at `position`
  for (const SafetensorsEntry* e : order) {
    if (e->begin > position)
      malformed(where, "gap of ", e->begin - position, " unused bytes at data offset ", position,
                " before tensor ", quote(e->name));
    if (e->begin < position)
      malformed(where, "tensors ", quote(previous->name), " and ", quote(e->name), " overlap (data bytes [",
                e->begin, ", ", std::min(position, e->end), "))");
    if (e->end > position) {
      position = e->end;
      previous = e;
    }
  }
  if (position > data_size)
    malformed(where, "truncated data: tensor ", quote(previous->name), " ends at data offset ", position,
              " but the file holds only ", data_size, " bytes of data");
  if (position < data_size)
    malformed(where, data_size - position, " trailing bytes after the last tensor (data ends at offset ",
              position, " of ", data_size, ")");
}

// Parses and validates the N header bytes; `data_size` is what the file holds after them.
SafetensorsHeader parse_header(const std::string& where, std::string_view text, std::uint64_t data_size) {
  if (text.empty() || text.front() != '{')
    malformed(where, "the header does not start with '{'", text.empty() ? " (it is empty)" : "");
  if (const std::size_t bad = invalid_utf8_offset(text); bad != std::string_view::npos)
    malformed(where, "the header is not valid UTF-8 (bad byte at header offset ", bad, ")");

  // nlohmann keeps the last of duplicate keys silently: the callback sees every key first.
  std::vector<std::unordered_set<std::string>> open_objects;
  std::vector<std::string> top_level_keys;  // the file's order (json objects sort their keys)
  std::string duplicate, duplicate_in;
  std::string current_entry, entry_key;  // the last keys at depths 1 and 2
  std::size_t shape_dims = 0;
  bool in_shape = false;  // inside an entry's "shape" array, counting its elements
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (in_shape && depth == 3 && (event == json::parse_event_t::value || event == json::parse_event_t::array_start ||
                                   event == json::parse_event_t::object_start) &&
        ++shape_dims > kMaxDims)
      malformed(where, "entry ", quote(current_entry), ": shape has more than ", kMaxDims, " dimensions");
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        if (event == json::parse_event_t::array_start && depth == 2 && entry_key == "shape") {
          in_shape = true;
          shape_dims = 0;
        }
        break;
      case json::parse_event_t::array_end:
        if (depth == 2) in_shape = false;
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(key).second && duplicate.empty()) {
          duplicate = key;
          duplicate_in = depth == 1 ? "the header" : "entry " + quote(current_entry);
        }
        if (depth == 1) {
          top_level_keys.push_back(key);
          current_entry = key;
        }
        if (depth == 2) entry_key = key;
        break;
      }
      default:
        break;
    }
    return true;
  };
  // The input layer checks the depth before the callback sees an event (and names the header).
  const json root = parse_json(detail::concat("safetensors: '", where, "': the header"), text, text.size(),
                               kMaxHeaderDepth, callback);
  if (!duplicate.empty()) malformed(where, "duplicate key ", quote(duplicate), " in ", duplicate_in);
  if (!root.is_object()) malformed(where, "the header is not a JSON object");

  SafetensorsHeader header;
  header.header_size = text.size();
  header.data_size = data_size;
  for (const std::string& key : top_level_keys) {
    const json& value = root.at(key);
    if (key == "__metadata__")
      header.metadata = parse_metadata(where, value);
    else
      header.tensors.push_back(parse_entry(where, key, value));
  }
  check_layout(where, header.tensors, data_size);
  return header;
}

// ---- tensors -----------------------------------------------------------------------------

template <class T>
Array<T> decode(const SafetensorsEntry& e, const unsigned char* p) {
  Array<T> a = empty_array<T>(e.shape);
  T* out = a.data();
  const std::size_t n = a.size();
  if (e.dtype == "F32") {
    for (std::size_t i = 0; i < n; ++i)
      out[i] = static_cast<T>(float_from_bits(static_cast<std::uint32_t>(load_le(p + 4 * i, 4))));
  } else if (e.dtype == "F64") {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t bits = load_le(p + 8 * i, 8);
      double d;
      std::memcpy(&d, &bits, sizeof d);
      out[i] = narrow<T>(d);
    }
  } else if (e.dtype == "F16") {
    for (std::size_t i = 0; i < n; ++i)
      out[i] = static_cast<T>(half_to_float(static_cast<std::uint16_t>(load_le(p + 2 * i, 2))));
  } else {  // BF16, as check_loadable guarantees
    for (std::size_t i = 0; i < n; ++i)
      out[i] = static_cast<T>(bfloat16_to_float(static_cast<std::uint16_t>(load_le(p + 2 * i, 2))));
  }
  return a;
}

bool keep_all(const std::string&) { return true; }

// The dtype of every tensor that `keep` selects.
void check_loadable(const std::string& where, const SafetensorsHeader& header,
                    const SafetensorsFilter& keep = keep_all) {
  for (const auto& e : header.tensors)
    if (keep(e.name) && e.dtype != "F32" && e.dtype != "F64" && e.dtype != "F16" && e.dtype != "BF16")
      malformed(where, "tensor ", quote(e.name), " has dtype ", e.dtype,
                ", which xgrad does not load (it loads F16, BF16, F32 and F64)");
}

// An open regular file with its size (a device, FIFO or folder is refused before any read);
// errors of the file system are std::runtime_error.
struct InputFile {
  RegularFile file;
  std::uint64_t size = 0;
  std::string path;

  explicit InputFile(const std::string& p) : file("safetensors", p), size(file.size()), path(p) {}

  // Reads [offset, offset + n), already checked to lie within `size`.
  void read(std::uint64_t offset, std::uint64_t n, void* out) {
    if (file.read_at(offset, n, out) != n)
      malformed(path, "cannot read bytes [", offset, ", ", offset + n,
                "): the file shrank while being read or is unreadable");
  }
};

SafetensorsHeader read_header(InputFile& file) {
  check_file_size(file.path, file.size);
  unsigned char length[8];
  file.read(0, 8, length);
  const std::uint64_t n = load_le(length, 8);
  check_header_length(file.path, n, file.size);
  std::string text(n, '\0');
  file.read(8, n, text.data());
  return parse_header(file.path, text, file.size - 8 - n);
}

// ---- writing -----------------------------------------------------------------------------

template <class T>
constexpr const char* dtype_name() {
  return std::is_same_v<T, float> ? "F32" : "F64";
}

// IEEE binary16 nearest to x (ties to even, as torch's .to(torch.float16)): past 65504 by half an
// ulp or more +-inf; NaN stays NaN (quiet, sign kept); below 2^-14 a subnormal.
std::uint16_t float_to_half(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<std::uint16_t>((a >> 13) & 0x3ffu);
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520: rounds (to even) to infinity
  if (a < 0x38800000u)                          // < 2^-14: mantissa * 2^-24, rounded to nearest even
    return sign | static_cast<std::uint16_t>(std::nearbyint(float_from_bits(a) * 16777216.0f));
  const std::uint32_t rebased = a - (112u << 23);  // exponent bias 127 -> 15
  return sign | static_cast<std::uint16_t>((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13);
}

// The bytes per element of a dtype write_safetensors writes, 0 for another.
std::size_t written_itemsize(const std::string& dtype) {
  return dtype == "F64" ? 8 : dtype == "F32" ? 4 : dtype == "BF16" || dtype == "F16" ? 2 : 0;
}

// The dtype `name` is written as: `dtypes`' entry, else T's.
template <class T>
std::string written_dtype(const std::string& name, const SafetensorsDtypes& dtypes) {
  const auto it = dtypes.find(name);
  return it != dtypes.end() ? it->second : dtype_name<T>();
}

// x in `dtype`, little-endian, at p (written_itemsize(dtype) bytes).
template <class T>
void encode(T x, const std::string& dtype, unsigned char* p) {
  if (dtype == "F64") {
    std::uint64_t bits;
    const double d = x;
    std::memcpy(&bits, &d, 8);
    store_le(p, bits, 8);
    return;
  }
  const float f = narrow<float>(static_cast<double>(x));
  if (dtype == "BF16" || dtype == "F16") {
    store_le(p, dtype == "BF16" ? detail::bf16_bits(f) : float_to_half(f), 2);
    return;
  }
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  store_le(p, bits, 4);
}

void check_utf8(const std::string& s, const char* what) {
  XGRAD_CHECK(invalid_utf8_offset(s) == std::string_view::npos, "save_safetensors: ", what,
              " is not valid UTF-8 (bad byte at offset ", invalid_utf8_offset(s), ")");
}

template <class T>
void check_saveable(const NamedArrays<T>& tensors, const SafetensorsMetadata& metadata,
                    const SafetensorsDtypes& dtypes = {}) {
  for (const auto& [name, dtype] : dtypes)
    XGRAD_CHECK(written_itemsize(dtype) != 0, "save_safetensors: tensor ", quote(name), " cannot be written as ",
                quote(dtype), ": expected F32, F64, BF16 or F16");
  std::unordered_set<std::string> names;
  for (const auto& [name, array] : tensors) {
    check_utf8(name, "a tensor name");
    XGRAD_CHECK(name != "__metadata__", "save_safetensors: a tensor cannot be named \"__metadata__\"");
    XGRAD_CHECK(names.insert(name).second, "save_safetensors: duplicate tensor name ", quote(name));
  }
  for (const auto& [key, value] : metadata) {
    check_utf8(key, "a metadata key");
    check_utf8(value, "a metadata value");
  }
}

// The JSON header, padded with spaces to a multiple of 8 bytes so that the data buffer starts
// 8-aligned. Tensors are laid out back to back in the given order.
template <class T>
std::string make_header(const NamedArrays<T>& tensors, const SafetensorsMetadata& metadata,
                        const SafetensorsDtypes& dtypes) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":";
    h += json(metadata).dump();
  }
  std::uint64_t offset = 0;
  for (const auto& [name, array] : tensors) {
    if (h.size() > 1) h += ',';
    const std::string dtype = written_dtype<T>(name, dtypes);
    const std::uint64_t bytes = array.size() * written_itemsize(dtype);
    h += quote(name) + ":{\"dtype\":\"" + dtype + "\",\"shape\":" + json(shape_of(array)).dump() +
         ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  InputFile file(path);
  return read_header(file);
}

template <class T>
NamedArrays<T> load_safetensors(const std::string& path, SafetensorsMetadata* metadata) {
  return load_safetensors_if<T>(path, keep_all, metadata);
}

template <class T>
NamedArrays<T> load_safetensors_if(const std::string& path, const SafetensorsFilter& keep,
                                   SafetensorsMetadata* metadata) {
  InputFile file(path);
  const SafetensorsHeader header = read_header(file);
  check_loadable(path, header, keep);
  const std::uint64_t data_start = 8 + header.header_size;
  NamedArrays<T> result;
  std::vector<unsigned char> bytes;
  for (const auto& e : header.tensors) {
    if (!keep(e.name)) continue;
    bytes.resize(e.end - e.begin);
    file.read(data_start + e.begin, bytes.size(), bytes.data());
    result.emplace_back(e.name, decode<T>(e, bytes.data()));
  }
  if (metadata != nullptr) *metadata = header.metadata;
  return result;
}

template <class T>
NamedArrays<T> load_safetensors_from_memory(const void* data, std::size_t size, SafetensorsMetadata* metadata,
                                            const std::string& name) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  check_file_size(name, size);
  const std::uint64_t n = load_le(bytes, 8);
  check_header_length(name, n, size);
  const std::string_view text(reinterpret_cast<const char*>(bytes + 8), n);
  const SafetensorsHeader header = parse_header(name, text, size - 8 - n);
  check_loadable(name, header);
  const unsigned char* buffer = bytes + 8 + n;
  NamedArrays<T> result;
  for (const auto& e : header.tensors) result.emplace_back(e.name, decode<T>(e, buffer + e.begin));
  if (metadata != nullptr) *metadata = header.metadata;
  return result;
}

template <class T>
void write_safetensors(std::ostream& out, const NamedArrays<T>& tensors, const SafetensorsMetadata& metadata,
                       const SafetensorsDtypes& dtypes) {
  check_saveable(tensors, metadata, dtypes);
  const std::string header = make_header(tensors, metadata, dtypes);
  unsigned char length[8];
  store_le(length, header.size(), 8);
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));

  constexpr std::size_t kChunk = 8192;  // elements encoded per write
  std::vector<unsigned char> chunk(kChunk * 8);
  for (const auto& [name, array] : tensors) {
    const std::string dtype = written_dtype<T>(name, dtypes);
    const std::size_t size = written_itemsize(dtype);
    const T* p = array.data();
    for (std::size_t start = 0, n = array.size(); start < n && out; start += kChunk) {
      const std::size_t count = std::min(kChunk, n - start);
      for (std::size_t i = 0; i < count; ++i) encode(p[start + i], dtype, chunk.data() + i * size);
      out.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(count * size));
    }
  }
}

template <class T>
std::string safetensors_bytes(const NamedArrays<T>& tensors, const SafetensorsMetadata& metadata,
                              const SafetensorsDtypes& dtypes) {
  std::ostringstream out(std::ios::binary);
  write_safetensors(out, tensors, metadata, dtypes);
  return out.str();
}

template <class T>
void save_safetensors(const NamedArrays<T>& tensors, const std::string& path,
                      const SafetensorsMetadata& metadata) {
  check_saveable(tensors, metadata);  // std::invalid_argument before any file is touched
  write_file_atomically(path, [&](std::ostream& out) { write_safetensors(out, tensors, metadata); });
}

#define XGRAD_INSTANTIATE(T)                                                                              \
  template NamedArrays<T> load_safetensors<T>(const std::string&, SafetensorsMetadata*);                  \
  template NamedArrays<T> load_safetensors_from_memory<T>(const void*, std::size_t, SafetensorsMetadata*, \
                                                          const std::string&);                            \
  template void write_safetensors<T>(std::ostream&, const NamedArrays<T>&, const SafetensorsMetadata&,    \
                                     const SafetensorsDtypes&);                                           \
  template std::string safetensors_bytes<T>(const NamedArrays<T>&, const SafetensorsMetadata&,            \
                                            const SafetensorsDtypes&);                                    \
  template void save_safetensors<T>(const NamedArrays<T>&, const std::string&, const SafetensorsMetadata&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE
template NamedArrays<float> load_safetensors_if<float>(const std::string&, const SafetensorsFilter&,
                                                       SafetensorsMetadata*);
template NamedArrays<double> load_safetensors_if<double>(const std::string&, const SafetensorsFilter&,
                                                         SafetensorsMetadata*);

}  // namespace xgrad
