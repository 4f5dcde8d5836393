// The values that define a training run's results ("settings": the model's sizes, the learning
// rate, the seed...), bound to the program's own variables. The Trainer saves them in every
// checkpoint (metadata "config.<key>") and its constructor gives them back on resume, so that a
// resumed run is rebuilt as the saved one was. No command-line parser is needed here: programs
// that use CLI11 bind flags and settings in one line with xgrad/train/cli.hpp.
//
//   int d_model = 64;  double lr = 2e-3;  bool bf16 = false;
//   xgrad::train::Settings settings;
//   settings.add("d-model", d_model);
//   settings.add("lr", lr);
//   settings.add_flag("bf16", bf16);   // saved as 0 or 1; off in a checkpoint written before it existed
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace xgrad::train {

// A refusal of the program's input (its flags, or a checkpoint that does not fit the run):
// guarded() prints the message alone and gives exit status 2.
class Refused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A setting's text, written so that it reads back to the same value (doubles with 17 digits).
std::string format_setting(int v);
std::string format_setting(std::uint64_t v);
std::string format_setting(std::int64_t v);
std::string format_setting(double v);
std::string format_setting(const std::string& v);
std::string format_setting(bool v);  // "0" or "1"
// Throws std::logic_error (std::invalid_argument, std::out_of_range) on malformed text.
void parse_setting(const std::string& text, int& v);
void parse_setting(const std::string& text, std::uint64_t& v);
void parse_setting(const std::string& text, std::int64_t& v);  // the whole text, as "-12"
void parse_setting(const std::string& text, double& v);
void parse_setting(const std::string& text, std::string& v);
void parse_setting(const std::string& text, bool& v);

class Settings {
 public:
  // Binds `value` (any integer type: int, std::int64_t, std::size_t...; float, double or
  // std::string) to `key`; the variable must outlive the Settings. A saved value out of an integer
  // type's range is refused (std::out_of_range).
  template <class T>
  void add(const std::string& key, T& value) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, int> &&
                  !std::is_same_v<T, std::uint64_t> && !std::is_same_v<T, std::int64_t>) {
      using Wide = std::conditional_t<std::is_signed_v<T>, std::int64_t, std::uint64_t>;
      entries_.push_back({key, [&value] { return format_setting(static_cast<Wide>(value)); },
                          [&value](const std::string& text) {
                            Wide w = 0;
                            parse_setting(text, w);
                            if constexpr (sizeof(T) < sizeof(Wide)) {
                              if (w < static_cast<Wide>(std::numeric_limits<T>::min()) ||
                                  w > static_cast<Wide>(std::numeric_limits<T>::max()))
                                throw std::out_of_range("out of the setting's integer range: " + text.substr(0, 40));
                            }
                            value = static_cast<T>(w);
                          },
                          false});
    } else if constexpr (std::is_same_v<T, float>) {
      entries_.push_back({key, [&value] { return format_setting(static_cast<double>(value)); },
                          [&value](const std::string& text) {
                            double d = 0;
                            parse_setting(text, d);
                            value = static_cast<float>(d);
                          },
                          false});
    } else {
      entries_.push_back({key, [&value] { return format_setting(value); },
                          [&value](const std::string& text) { parse_setting(text, value); }, false});
    }
  }
  // A boolean switch: a checkpoint written before it existed resumes with it off (complete()).
  void add_flag(const std::string& key, bool& value);

  // Key -> value text, in the order added.
  std::vector<std::pair<std::string, std::string>> values() const;
  // Sets every variable from `saved`; throws std::logic_error naming the key (`key_prefix` + key)
  // on a missing entry (std::out_of_range "no key 'config.lr'") or a malformed one
  // (std::invalid_argument, or std::out_of_range beyond the variable's range).
  void assign(const std::map<std::string, std::string>& saved, const std::string& key_prefix = "");
  // Adds to `saved` the switches it lacks, as off (a checkpoint written before they existed).
  void complete(std::map<std::string, std::string>& saved) const;

 private:
  struct Entry {
    std::string key;
    std::function<std::string()> get;
    std::function<void(const std::string&)> set;
    bool is_flag = false;
  };
  std::vector<Entry> entries_;
};

}  // namespace xgrad::train
