// File readers (readers.hpp): .npy, numeric CSV, text lines.
#include <xgrad/data/readers.hpp>

#include <xgrad/serialize/atomic_file.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <xtensor/xadapt.hpp>
#include <xtensor/xnpy.hpp>

namespace xgrad::data {

namespace {

[[noreturn]] void fail(const char* who, const std::string& path, const std::string& what) {
  throw std::runtime_error(std::string(who) + ": '" + path + "': " + what);
}

// The whole file; throws naming it when it cannot be opened, is not a regular file (a FIFO would
// block, /dev/zero never ends: refused before any read; at most the size fstat gives is read) or
// is empty.
std::string read_file(const char* who, const std::string& path) {
  std::string data;
  try {
    data = read_regular_file(who, path);
  } catch (const std::runtime_error& e) {
    // "who: cannot open 'path': reason" -> "who: 'path': cannot open the file (reason)", as the
    // readers' other messages.
    const std::string what = e.what(), quoted = "'" + path + "': ";
    const std::size_t at = what.find(quoted), verb = what.find(": cannot ");
    if (at == std::string::npos || verb == std::string::npos) throw;
    const std::string action = what.substr(verb + 2, at - verb - 3);  // "cannot open", "cannot read"
    fail(who, path, action + " the file (" + what.substr(at + quoted.size()) + ")");
  }
  if (data.empty()) fail(who, path, "the file is empty");
  return data;
}

template <class S, class T>
xt::xarray<T> convert(const char* bytes, const Shape& shape, bool fortran_order) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  std::vector<S> values(n);  // aligned copy of the data
  if (n > 0) std::memcpy(values.data(), bytes, n * sizeof(S));
  const auto layout = fortran_order ? xt::layout_type::column_major : xt::layout_type::row_major;
  Shape strides(shape.size());
  xt::compute_strides(shape, layout, strides);
  auto view = xt::adapt(values.data(), n, xt::no_ownership(), shape, strides);
  xt::xarray<T> out = xt::cast<T>(view);
  return out;
}

}  // namespace

template <class T>
xt::xarray<T> read_npy(const std::string& path) {
  constexpr const char* who = "read_npy";
  const std::string data = read_file(who, path);
  // "\x93NUMPY", major, minor, header length (2 bytes in version 1, 4 in 2 and 3, little-endian).
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) fail(who, path, "not a .npy file (no \\x93NUMPY magic)");
  const auto major = static_cast<unsigned char>(data[6]);
  if (major < 1 || major > 3) fail(who, path, "unsupported .npy version " + std::to_string(major));
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (data.size() < 8 + len_bytes) fail(who, path, "truncated header");
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i)
    header_len |= static_cast<std::size_t>(static_cast<unsigned char>(data[8 + i])) << (8 * i);
  const std::size_t data_start = 8 + len_bytes + header_len;
  if (data.size() < data_start) fail(who, path, "truncated header");
  std::string descr;
  bool fortran_order = false;
  Shape shape;
  try {
    xt::detail::parse_header(data.substr(8 + len_bytes, header_len), descr, &fortran_order, shape);
  } catch (const std::exception& e) {
    fail(who, path, std::string("malformed header (") + e.what() + ")");
  }
  if (descr.size() < 3 || descr[0] == '>') fail(who, path, "unsupported dtype '" + descr + "' (big-endian or unknown)");
  const std::string kind = descr.substr(1);
  std::size_t word = 0;
  if (kind == "f4" || kind == "i4") word = 4;
  else if (kind == "f8" || kind == "i8") word = 8;
  else if (kind == "u1" || kind == "b1") word = 1;
  else fail(who, path, "unsupported dtype '" + descr + "' (float32, float64, int32, int64, uint8, bool are read)");
  std::size_t n = 1;
  for (std::size_t d : shape) {
    if (d != 0 && n > std::numeric_limits<std::size_t>::max() / d) fail(who, path, "the shape overflows");
    n *= d;
  }
  const std::size_t remaining = data.size() - data_start;
  if (n > remaining / word)
    fail(who, path, "truncated: the shape " + shape_str(shape) + " needs " + std::to_string(n) + " x " +
                        std::to_string(word) + " bytes of data, the file has " + std::to_string(remaining));
  const char* bytes = data.data() + data_start;
  if (kind == "f4") return convert<float, T>(bytes, shape, fortran_order);
  if (kind == "f8") return convert<double, T>(bytes, shape, fortran_order);
  if (kind == "i4") return convert<std::int32_t, T>(bytes, shape, fortran_order);
  if (kind == "i8") return convert<std::int64_t, T>(bytes, shape, fortran_order);
  return convert<std::uint8_t, T>(bytes, shape, fortran_order);  // u1, and b1 (bytes 0 or 1)
}

namespace {
std::vector<std::string> split_lines(const char* who, const std::string& path) {
  const std::string data = read_file(who, path);
  std::vector<std::string> lines;
  std::size_t begin = 0;
  while (begin < data.size()) {
    std::size_t end = data.find('\n', begin);
    if (end == std::string::npos) end = data.size();
    std::size_t stop = end;
    if (stop > begin && data[stop - 1] == '\r') --stop;
    lines.emplace_back(data, begin, stop - begin);
    begin = end + 1;
  }
  return lines;
}
}  // namespace

std::vector<std::string> read_lines(const std::string& path) { return split_lines("read_lines", path); }

template <class T>
xt::xarray<T> read_csv(const std::string& path, const CsvOptions& options) {
  constexpr const char* who = "read_csv";
  const std::vector<std::string> lines = split_lines(who, path);
  std::vector<T> values;
  std::size_t columns = 0, rows = 0, first_row_line = 0;
  for (std::size_t i = options.header() ? 1 : 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank
    const std::string where = "line " + std::to_string(i + 1);
    std::size_t fields = 0, begin = 0;
    for (;;) {
      std::size_t end = line.find(options.delimiter(), begin);
      if (end == std::string::npos) end = line.size();
      const std::string field = line.substr(begin, end - begin);
      ++fields;
      const char* start = field.c_str();
      char* stop = nullptr;
      errno = 0;
      const double v = std::strtod(start, &stop);
      const bool empty = stop == start;
      while (*stop == ' ' || *stop == '\t') ++stop;
      if (empty || *stop != '\0' || (errno == ERANGE && std::isinf(v)))
        fail(who, path, where + ", field " + std::to_string(fields) + ": '" + field + "' is not a number");
      values.push_back(static_cast<T>(v));
      if (end == line.size()) break;
      begin = end + 1;
    }
    if (rows == 0) {
      columns = fields;
      first_row_line = i + 1;
    } else if (fields != columns) {
      fail(who, path, where + " has " + std::to_string(fields) + " fields, line " + std::to_string(first_row_line) +
                          " has " + std::to_string(columns) + " (every row needs the same number)");
    }
    ++rows;
  }
  if (rows == 0) fail(who, path, options.header() ? "no rows after the header" : "no rows (only blank lines)");
  xt::xarray<T> out = empty_array<T>({rows, columns});
  std::copy(values.begin(), values.end(), out.data());
  return out;
}

TextLineDataset::TextLineDataset(std::string path) : path_(std::move(path)), lines_(read_lines(path_)) {}

std::string TextLineDataset::get(std::size_t index) const {
  detail::check_index("TextLineDataset('" + path_ + "').get", index, lines_.size());
  return lines_[index];
}

template xt::xarray<float> read_npy<float>(const std::string&);
template xt::xarray<double> read_npy<double>(const std::string&);
template xt::xarray<std::int64_t> read_npy<std::int64_t>(const std::string&);
template xt::xarray<float> read_csv<float>(const std::string&, const CsvOptions&);
template xt::xarray<double> read_csv<double>(const std::string&, const CsvOptions&);

}  // namespace xgrad::data
