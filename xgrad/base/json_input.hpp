// JSON through the input layer: a file read with a size bound, parsed once with a depth limit, and
// read key by key with the key path named in every error.
//
//   const nlohmann::json root = read_json_file("load_hf_gpt2", path, kMaxConfigBytes, "config file");
//   const JsonValue config(path, root);
//   const int n = config.at("n_positions").integer<int>(1, 1 << 20);
//     // "config.json: n_positions: expected an integer in [1, 1048576], got 1e99"
//   const JsonValue normalizer = JsonValue(path, root).at_or_null("normalizer");
//     // "tokenizer.json: normalizer: expected an object or null, got an array of 3 elements"
//
// Hostile input: nlohmann's parser is iterative and so is its destructor, but dump(), copies and
// comparisons recurse: the depth limit bounds them, and no error message dumps a value
// (describe_json says what it is in a few words).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <xgrad/base/input.hpp>

namespace xgrad {

// The nesting every JSON file xgrad reads stays within (config.json, tokenizer.json and
// safetensors headers nest 2 to 5 levels).
constexpr int kMaxJsonDepth = 64;

// Called for each parse event after the depth check (nlohmann's parser_callback_t), for a reader
// that watches the keys as they come (duplicate keys); it may throw.
using JsonCallback = std::function<bool(int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed)>;

// `text` as JSON: at most max_bytes, nesting at most max_depth levels; else FormatError
// "file: ..." naming the byte offset (nlohmann's message, its excerpt cut short).
nlohmann::json parse_json(const std::string& file, std::string_view text, std::uint64_t max_bytes,
                          int max_depth = kMaxJsonDepth, const JsonCallback& callback = nullptr);

// read_regular_file(who, path, max_bytes, what) + parse_json; errors name `who` and the path.
nlohmann::json read_json_file(const char* who, const std::string& path, std::uint64_t max_bytes, const char* what,
                              int max_depth = kMaxJsonDepth);

// What a value is, in a few words and without recursion: a scalar as its JSON text ("null",
// "true", "12", "1e+99", "\"abc\""; cut at 40 bytes), a container as "an array of 3 elements",
// "an object of 2 keys".
std::string describe_json(const nlohmann::json& value);

// A value of a parsed file and its key path ("model.vocab", "added_tokens[3].content"): the
// typed getters check the type and the range and name the file and the path when they refuse.
class JsonValue {
 public:
  JsonValue(std::string file, const nlohmann::json& value, std::string path = "")
      : file_(std::move(file)), value_(&value), path_(std::move(path)) {}

  const nlohmann::json& json() const { return *value_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }  // "" for the whole file

  bool is_null() const { return value_->is_null(); }
  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  bool is_string() const { return value_->is_string(); }

  // The key path of a member or element: path.key (path["key"] when the key is not a plain name)
  // and path[i].
  std::string key_path(const std::string& key) const;
  std::string index_path(std::size_t i) const;

  // Members of an object (this must be one): a present key, or the error "no key 'path.key'".
  JsonValue at(const std::string& key) const;
  // True when the object has `key` and it is not null.
  bool has(const std::string& key) const;
  // The member, or a null value when absent (with its path, for the messages).
  JsonValue at_or_null(const std::string& key) const;
  // Elements of an array (this must be one; i < size()).
  JsonValue at(std::size_t i) const;
  std::size_t size() const;  // of an array or object (this must be one)

  // Type checks: return *this, or throw "file: path: expected <what>, got <describe_json>".
  const JsonValue& expect_object() const;
  const JsonValue& expect_array() const;
  const JsonValue& expect_object_or_null() const;

  std::string string() const;
  bool boolean() const;
  // An integer in [lo, hi] and in T's range (a float such as 3.0 or 1e99 is refused).
  template <class T>
  T integer(T lo = std::numeric_limits<T>::lowest(), T hi = std::numeric_limits<T>::max()) const;
  // A finite number in [lo, hi] (integers too).
  double number(double lo = -std::numeric_limits<double>::max(), double hi = std::numeric_limits<double>::max()) const;

  // Throws FormatError "file: path: message" ("file: message" for the whole file).
  [[noreturn]] void fail(const std::string& message) const;
  // "expected <expected>, got <what this value is>".
  [[noreturn]] void fail_expected(const std::string& expected) const;

 private:
  std::string file_;
  const nlohmann::json* value_;
  std::string path_;
};

}  // namespace xgrad
