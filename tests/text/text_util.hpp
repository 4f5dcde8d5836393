// Helpers of the text tests: the GPT-2 tokenizer of tests/fixtures/tokenizer (loaded once), the
// corpus, hex, a temporary folder, an exception's message. Plain C++: no tensors here.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/text/bpe.hpp>

namespace xgrad::testing {

inline std::string tokenizer_fixture(const std::string& name) {
  return std::string(XGRAD_FIXTURES_DIR) + "/tokenizer/" + name;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// GPT-2's tokenizer from the committed encoder.json + vocab.bpe, loaded once.
inline const text::BPETokenizer& gpt2() {
  static const text::BPETokenizer tok =
      text::BPETokenizer::from_files(tokenizer_fixture("encoder.json"), tokenizer_fixture("vocab.bpe"));
  return tok;
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// corpus.json: (name, bytes) in order.
inline const std::vector<std::pair<std::string, std::string>>& corpus() {
  static const auto cases = [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& c : nlohmann::json::parse(read_file(tokenizer_fixture("corpus.json"))))
      out.emplace_back(c["name"].get<std::string>(), from_hex(c["hex"].get<std::string>()));
    return out;
  }();
  return cases;
}

// What f throws (its what()), or "(no exception)".
template <class Exception = std::exception>
std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.what();
  }
  return "(no exception)";
}

class TempFolder {
 public:
  TempFolder() {
    std::string name = (std::filesystem::temp_directory_path() / "xgrad_text_XXXXXX").string();
    EXPECT_NE(::mkdtemp(name.data()), nullptr);
    path_ = name;
  }
  ~TempFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace xgrad::testing
