// JSON through the input layer (json_input.hpp).
#include <xgrad/base/json_input.hpp>

#include <cctype>
#include <cmath>

#include <xgrad/base/check.hpp>

namespace xgrad {

namespace {

using json = nlohmann::json;

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// nlohmann's message, cut short: a syntax error quotes the last token read, which may be a whole
// (hostile, megabytes long) string.
std::string parse_error_text(const json::exception& e) {
  const std::string what = e.what();
  constexpr std::size_t kShown = 200;
  return what.size() <= kShown ? what : what.substr(0, kShown) + "... (cut)";
}

bool plain_name(const std::string& key) {
  if (key.empty()) return false;
  for (const char c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

}  // namespace

json parse_json(const std::string& file, std::string_view text, std::uint64_t max_bytes, int max_depth,
                const JsonCallback& callback) {
  if (text.size() > max_bytes)
    throw FormatError(detail::concat(file, ": ", text.size(), " bytes of JSON, more than the ", max_bytes, " allowed"));
  // The depth check sees every container as it opens: deeper input never reaches the DOM.
  const auto checked = [&](int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= max_depth)
      throw FormatError(detail::concat(file, ": the JSON nests deeper than ", max_depth, " levels"));
    return callback ? callback(depth, event, parsed) : true;
  };
  try {
    return json::parse(text.begin(), text.end(), checked);
  } catch (const json::exception& e) {
    throw FormatError(file + ": not valid JSON: " + parse_error_text(e));
  }
}

json read_json_file(const char* who, const std::string& path, std::uint64_t max_bytes, const char* what,
                    int max_depth) {
  const std::string text = read_regular_file(who, path, max_bytes, what);
  return parse_json(std::string(who) + ": '" + path + "'", text, max_bytes, max_depth);
}

std::string describe_json(const json& value) {
  if (value.is_array()) return "an array of " + plural(value.size(), "element", "elements");
  if (value.is_object()) return "an object of " + plural(value.size(), "key", "keys");
  if (value.is_binary()) return "binary data";
  // A scalar: its JSON text (no recursion), cut short.
  const std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr std::size_t kShown = 40;
  return text.size() <= kShown ? text : text.substr(0, kShown - 3) + "... (" + std::to_string(text.size()) + " bytes)";
}

// ---- JsonValue -----------------------------------------------------------------------------------

std::string JsonValue::key_path(const std::string& key) const {
  if (!plain_name(key)) return path_ + "[" + quote_excerpt(key) + "]";
  return path_.empty() ? key : path_ + "." + key;
}

std::string JsonValue::index_path(std::size_t i) const { return path_ + "[" + std::to_string(i) + "]"; }

void JsonValue::fail(const std::string& message) const {
  throw FormatError(file_ + ": " + (path_.empty() ? "" : path_ + ": ") + message);
}

void JsonValue::fail_expected(const std::string& expected) const {
  fail("expected " + expected + ", got " + describe_json(*value_));
}

const JsonValue& JsonValue::expect_object() const {
  if (!is_object()) fail_expected("an object");
  return *this;
}

const JsonValue& JsonValue::expect_array() const {
  if (!is_array()) fail_expected("an array");
  return *this;
}

const JsonValue& JsonValue::expect_object_or_null() const {
  if (!is_object() && !is_null()) fail_expected("an object or null");
  return *this;
}

JsonValue JsonValue::at(const std::string& key) const {
  expect_object();
  const auto it = value_->find(key);
  if (it == value_->end()) throw FormatError(file_ + ": no key '" + key_path(key) + "'");
  return JsonValue(file_, *it, key_path(key));
}

bool JsonValue::has(const std::string& key) const {
  expect_object();
  const auto it = value_->find(key);
  return it != value_->end() && !it->is_null();
}

JsonValue JsonValue::at_or_null(const std::string& key) const {
  static const nlohmann::json null_value;
  expect_object();
  const auto it = value_->find(key);
  return JsonValue(file_, it == value_->end() ? null_value : *it, key_path(key));
}

JsonValue JsonValue::at(std::size_t i) const {
  expect_array();
  if (i >= value_->size()) fail(detail::concat("no element ", i, " (the array has ", value_->size(), ")"));
  return JsonValue(file_, (*value_)[i], index_path(i));
}

std::size_t JsonValue::size() const {
  if (!is_object() && !is_array()) fail_expected("an array or an object");
  return value_->size();
}

std::string JsonValue::string() const {
  if (!is_string()) fail_expected("a string");
  return value_->get<std::string>();
}

bool JsonValue::boolean() const {
  if (!value_->is_boolean()) fail_expected("true or false");
  return value_->get<bool>();
}

template <class T>
T JsonValue::integer(T lo, T hi) const {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  bool ok = false;
  if (value_->is_number_integer()) {  // nlohmann's signed or unsigned integers, not floats
    // Every int64 and uint64 fits __int128: one comparison for each type.
    const __int128 v = value_->is_number_unsigned() ? static_cast<__int128>(value_->get<std::uint64_t>())
                                                    : static_cast<__int128>(value_->get<std::int64_t>());
    ok = v >= static_cast<__int128>(lo) && v <= static_cast<__int128>(hi);
  }
  if (!ok) fail_expected(detail::concat("an integer in [", +lo, ", ", +hi, "]"));
  return value_->get<T>();
}

double JsonValue::number(double lo, double hi) const {
  const double v = value_->is_number() ? value_->get<double>() : std::nan("");
  if (!(std::isfinite(v) && v >= lo && v <= hi)) fail_expected(detail::concat("a number in [", lo, ", ", hi, "]"));
  return v;
}

#define XGRAD_INSTANTIATE(T) template T JsonValue::integer<T>(T, T) const;
XGRAD_INSTANTIATE(int)
XGRAD_INSTANTIATE(unsigned int)
XGRAD_INSTANTIATE(long)
XGRAD_INSTANTIATE(unsigned long)
XGRAD_INSTANTIATE(long long)
XGRAD_INSTANTIATE(unsigned long long)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
