#include "settings.hpp"

#include <cstdio>

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

void parse_setting(const std::string& text, int& v) { v = std::stoi(text); }
void parse_setting(const std::string& text, std::uint64_t& v) {
  // std::stoull takes "-1" as 2^64 - 1.
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument("expected an integer in [0, 2^64 - 1], got " + text);
  v = std::stoull(text);  // std::out_of_range beyond 2^64 - 1
}
void parse_setting(const std::string& text, std::int64_t& v) {
  std::size_t end = 0;
  const long long parsed = std::stoll(text, &end);  // std::invalid_argument, std::out_of_range
  if (end != text.size()) throw std::invalid_argument("expected an integer, got " + text);
  v = static_cast<std::int64_t>(parsed);
}
void parse_setting(const std::string& text, double& v) { v = std::stod(text); }
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

void Settings::assign(const std::map<std::string, std::string>& saved) {
  for (const auto& e : entries_) e.set(saved.at(e.key));
}

void Settings::complete(std::map<std::string, std::string>& saved) const {
  for (const auto& e : entries_)
    if (e.is_flag) saved.emplace(e.key, format_setting(false));
}

}  // namespace xgrad::train
