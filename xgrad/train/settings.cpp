#include "settings.hpp"

#include <cstdio>
#include <type_traits>

#include <xgrad/base/input.hpp>

namespace xgrad::train {

std::string format_setting(int v) { return std::to_string(v); }
std::string format_setting(std::uint64_t v) { return std::to_string(v); }
std::string format_setting(std::int64_t v) { return std::to_string(v); }
std::string format_setting(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
std::string format_setting(const std::string& v) { return v; }
std::string format_setting(bool v) { return v ? "1" : "0"; }

namespace {

// The whole text as a T (input.hpp): std::invalid_argument when malformed, std::out_of_range
// beyond T's range (Settings' documented errors).
template <class T>
void parse_checked(const std::string& text, T& v, const char* expected) {
  const NumberStatus status = [&] {
    if constexpr (std::is_same_v<T, double>)
      return number_from_text(text, v);
    else
      return integer_from_text(text, v);
  }();
  if (status == NumberStatus::malformed)
    throw std::invalid_argument(std::string("expected ") + expected + ", got " + quote_excerpt(text));
  if (status == NumberStatus::out_of_range)
    throw std::out_of_range(std::string("expected ") + expected + ", got " + quote_excerpt(text) + ", out of range");
}

}  // namespace

void parse_setting(const std::string& text, int& v) { parse_checked(text, v, "an integer in [-2^31, 2^31 - 1]"); }
void parse_setting(const std::string& text, std::uint64_t& v) {
  // "-1" is not 2^64 - 1 (as the C library's strtoull would take it): a malformed value.
  if (!text.empty() && text[0] == '-')
    throw std::invalid_argument("expected an integer in [0, 2^64 - 1], got " + quote_excerpt(text));
  parse_checked(text, v, "an integer in [0, 2^64 - 1]");
}
void parse_setting(const std::string& text, std::int64_t& v) {
  parse_checked(text, v, "an integer in [-2^63, 2^63 - 1]");
}
void parse_setting(const std::string& text, double& v) { parse_checked(text, v, "a number"); }
void parse_setting(const std::string& text, std::string& v) { v = text; }
void parse_setting(const std::string& text, bool& v) {
  if (text != "0" && text != "1") throw std::invalid_argument("a flag is saved as 0 or 1, got " + text);
  v = text == "1";
}

void Settings::add_flag(const std::string& key, bool& value) {
  entries_.push_back({key, [&value] { return format_setting(value); },
                      [&value](const std::string& text) { parse_setting(text, value); }, true});
}

std::vector<std::pair<std::string, std::string>> Settings::values() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : entries_) out.emplace_back(e.key, e.get());
  return out;
}

void Settings::assign(const std::map<std::string, std::string>& saved, const std::string& key_prefix) {
  for (const auto& e : entries_) {
    const auto it = saved.find(e.key);
    if (it == saved.end()) throw std::out_of_range("no key '" + key_prefix + e.key + "'");
    try {
      e.set(it->second);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument(key_prefix + e.key + ": " + error.what());
    } catch (const std::out_of_range& error) {
      throw std::out_of_range(key_prefix + e.key + ": " + error.what());
    }
  }
}

void Settings::complete(std::map<std::string, std::string>& saved) const {
  for (const auto& e : entries_)
    if (e.is_flag) saved.emplace(e.key, format_setting(false));
}

}  // namespace xgrad::train
