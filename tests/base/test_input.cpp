// The input layer (xgrad/base/input.hpp, json_input.hpp): size bounds, depth-limited JSON, key
// paths in errors, checked number conversions; and the guard that no library or example source
// reads a file or converts a number around it.
#include "test_util.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include <xgrad/base/input.hpp>
#include <xgrad/base/json_input.hpp>

#include "address_space_limit.hpp"

using namespace xgrad;

namespace {

namespace fs = std::filesystem;

// ---- the guard ---------------------------------------------------------------------------------

// The input layer's own files: the only ones that may open files and convert numbers directly.
bool in_input_layer(const std::string& rel) {
  return rel == "xgrad/base/input.cpp" || rel == "xgrad/base/input.hpp" || rel == "xgrad/base/json_input.cpp" ||
         rel == "xgrad/base/json_input.hpp";
}

// Every line of xgrad/ and examples/ under `root` that opens a file or converts a number around
// the input layer: std::ifstream, fopen, nlohmann::json::parse, the std::sto* family.
std::vector<std::string> raw_input_calls(const fs::path& root) {
  static const std::regex raw(R"(std::ifstream|\bfopen\s*\(|json::parse\s*\(|\bstd::sto(i|l|ll|ul|ull|f|d|ld)\s*\()");
  std::vector<std::string> found;
  for (const char* folder : {"xgrad", "examples"}) {
    if (!fs::exists(root / folder)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".h")) continue;
      const std::string rel = fs::relative(entry.path(), root).generic_string();
      if (in_input_layer(rel)) continue;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        if (std::regex_search(line, raw)) found.push_back(rel + ":" + std::to_string(n) + ": " + line);
    }
  }
  return found;
}

class Tree {
 public:
  Tree() {
    char name[] = "/tmp/xgrad-input-XXXXXX";
    EXPECT_NE(::mkdtemp(name), nullptr);
    path_ = name;
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& rel, const std::string& text) const {
    const fs::path p = fs::path(path_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(InputGuard, NoSourceReadsAFileOrConvertsANumberAroundTheInputLayer) {
  const fs::path root(XGRAD_SOURCE_DIR);
  ASSERT_TRUE(fs::exists(root / "xgrad" / "base" / "input.cpp"));
  for (const std::string& f : raw_input_calls(root)) ADD_FAILURE() << "around the input layer: " << f;
}

TEST(InputGuard, TheScanFindsAPlantedViolationOfEachKind) {
  const Tree tree;
  tree.write("xgrad/text/clean.cpp", "const auto j = parse_json(file, text, kMax);\n// json::parse_event_t\n");
  tree.write("xgrad/base/input.cpp", "std::ifstream in(path);\nstd::stoi(text);\n");  // the layer itself
  tree.write("xgrad/text/a.cpp", "  std::ifstream in(path);\n");
  tree.write("xgrad/models/b.cpp", "  FILE* f = fopen(path, \"r\");\n");
  tree.write("xgrad/serialize/c.hpp", "  return nlohmann::json::parse(text);\n");
  tree.write("examples/d.cpp", "  int n = std::stoi(flag);\n");
  tree.write("examples/support/e.hpp", "  auto v = std::stoull(text, &used, 10);\n");
  tree.write("xgrad/train/f.cpp", "  double d = std::stod (text);\n");
  const std::vector<std::string> expected = {
      "examples/d.cpp:1:",        "examples/support/e.hpp:1:", "xgrad/models/b.cpp:1:",
      "xgrad/serialize/c.hpp:1:", "xgrad/text/a.cpp:1:",       "xgrad/train/f.cpp:1:"};
  std::vector<std::string> found = raw_input_calls(tree.path());
  std::sort(found.begin(), found.end());
  ASSERT_EQ(found.size(), expected.size()) << ::testing::PrintToString(found);
  for (std::size_t i = 0; i < found.size(); ++i) EXPECT_EQ(found[i].rfind(expected[i], 0), 0u) << found[i];
}

// ---- files -------------------------------------------------------------------------------------

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(InputFiles, ASizeBoundIsCheckedBeforeReading) {
  const Tree tree;
  const std::string path = tree.write("big.json", "");
  ASSERT_EQ(::truncate(path.c_str(), (std::int64_t(1) << 40) + 1), 0);  // sparse: nothing written
  const std::string message = error_of([&] { read_regular_file("reader", path, 1u << 20, "test file"); });
  EXPECT_NE(message.find("reader: '" + path +
                         "' is 1099511627777 bytes (1048576 MiB), more than the 1048576 bytes "
                         "(1 MiB) a test file may be"),
            std::string::npos)
      << message;
  const std::string small = tree.write("small.txt", "abc");
  EXPECT_EQ(read_regular_file("reader", small, 3, "test file"), "abc");
  EXPECT_THROW(read_regular_file("reader", small, 2, "test file"), FormatError);
  // procfs files report a size of 0: read to their end, within the bound.
  EXPECT_NE(read_regular_file("reader", "/proc/self/status", 1 << 20, "procfs file").find("Name:"), std::string::npos);
  EXPECT_THROW(read_regular_file("reader", "/proc/self/status", 8, "procfs file"), FormatError);
  EXPECT_NE(error_of([] { read_regular_file("reader", "/dev/zero", 1 << 20, "test file"); }).find("a character device"),
            std::string::npos);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// Without a bound of its own, a file larger than the memory is an OutOfMemoryError naming it, not a
// bare std::bad_alloc. (The sanitizers' allocators abort instead: plain build only.)
TEST(InputFiles, AnUnboundedReadOfAHugeFileNamesTheFile) {
  const Tree tree;
  const std::string path = tree.write("huge.bin", "");
  ASSERT_EQ(::truncate(path.c_str(), std::int64_t(1) << 40), 0);
  std::string message = "no error";
  try {
    xgrad::testing::AddressSpaceLimit limit;
    limit.apply();
    read_regular_file("read_npy", path);
  } catch (const OutOfMemoryError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("read_npy: not enough memory to read '" + path + "' (1099511627776 bytes"), std::string::npos)
      << message;
}
#endif

TEST(InputFiles, AStreamIsARegularFileToo) {
  const Tree tree;
  const std::string path = tree.write("lines.txt", "one\ntwo\n");
  InputFileStream in("--text", path);
  std::string a, b, c;
  EXPECT_TRUE(std::getline(in, a) && std::getline(in, b));
  EXPECT_FALSE(std::getline(in, c));
  EXPECT_EQ(a + b, "onetwo");
  EXPECT_NE(error_of([&] {
              InputFileStream("--text", tree.path());
            }).find("--text: cannot read '" + tree.path() + "': it is a folder"),
            std::string::npos);
  EXPECT_TRUE(is_readable_regular_file(path));
  EXPECT_FALSE(is_readable_regular_file(tree.path()));
  EXPECT_FALSE(is_readable_regular_file("/dev/null"));
  EXPECT_FALSE(is_readable_regular_file(tree.path() + "/missing"));
}

// ---- numbers -----------------------------------------------------------------------------------

TEST(InputNumbers, IntegersAreTheWholeTextInRange) {
  EXPECT_EQ(parse_integer<int>("k", "12"), 12);
  EXPECT_EQ(parse_integer<int>("k", "-2147483648"), std::numeric_limits<int>::min());
  EXPECT_EQ(parse_integer<std::uint64_t>("k", "18446744073709551615"), ~std::uint64_t(0));
  for (const char* bad : {"", " 12", "12 ", "+1", "12abc", "1e99", "0x10", "1.0", "-", "--1", "2147483648"}) {
    const std::string message = error_of([&] { parse_integer<int>("run.ckpt: metadata max_steps", bad); });
    EXPECT_EQ(message.rfind("run.ckpt: metadata max_steps: expected an integer in [-2147483648, 2147483647], got '", 0),
              0u)
        << bad << ": " << message;
  }
  EXPECT_THROW(parse_integer<std::uint64_t>("k", "-1"), FormatError);
  EXPECT_THROW(parse_integer<std::uint64_t>("k", "18446744073709551616"), FormatError);
  EXPECT_THROW(parse_integer<int>("k", "-5", 0), FormatError);
  EXPECT_EQ(error_of([] { parse_integer<int>("step", "1099511627776", 0); }),
            "step: expected an integer in [0, 2147483647], got '1099511627776'");
  std::int8_t small = 0;
  EXPECT_EQ(integer_from_text("128", small), NumberStatus::out_of_range);
  EXPECT_EQ(integer_from_text("12a", small), NumberStatus::malformed);
  EXPECT_EQ(integer_from_text("99999999999999999999999x", small), NumberStatus::malformed);
  // A hostile text is quoted cut short, control bytes escaped.
  const std::string message = error_of([] { parse_integer<int>("k", std::string(1 << 20, '9') + "\n"); });
  EXPECT_LT(message.size(), 200u);
  EXPECT_NE(message.find("...' (1048577 bytes)"), std::string::npos) << message;
}

TEST(InputNumbers, NumbersAreTheWholeTextInRange) {
  EXPECT_EQ(parse_number("k", "0x1.8p+3"), 12.0);  // what %a writes
  EXPECT_EQ(parse_number("k", "-2.5e-3"), -2.5e-3);
  EXPECT_EQ(parse_number("k", "4.9e-324"), 4.9e-324);  // a subnormal is a number
  EXPECT_TRUE(std::isnan(parse_number("k", "nan", 0, 1, true)));
  for (const char* bad : {"", " 1", "1 ", "1.5x", "1e999", "nan", "abc"})
    EXPECT_THROW(parse_number("k", bad), FormatError) << bad;
  EXPECT_THROW(parse_number("k", std::string_view("1\0", 2)), FormatError);
  EXPECT_EQ(error_of([] { parse_number("run.ckpt: metadata elapsed", "-1", 0, 10); }),
            "run.ckpt: metadata elapsed: expected a number in [0, 10], got '-1'");
}

// ---- JSON --------------------------------------------------------------------------------------

TEST(InputJson, DeepNestingIsRefusedWithoutRecursion) {
  // 200 KB of '[' (and the same closed): nlohmann's parser is iterative, its dump() is not.
  for (const std::string& deep : {std::string(200000, '['), std::string(100000, '[') + std::string(100000, ']'),
                                  "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}"}) {
    const std::string message = error_of([&] { parse_json("deep.json", deep, 1 << 20); });
    EXPECT_EQ(message, "deep.json: the JSON nests deeper than 64 levels");
  }
  EXPECT_NO_THROW(parse_json("ok.json", std::string(63, '[') + std::string(63, ']'), 1 << 20));
  EXPECT_EQ(error_of([] { parse_json("big.json", "[1, 2, 3]", 4); }),
            "big.json: 9 bytes of JSON, more than the 4 allowed");
  // A syntax error's excerpt is cut short.
  const std::string message = error_of([] { parse_json("s.json", "\"" + std::string(1 << 20, 'a'), 1 << 21); });
  EXPECT_EQ(message.rfind("s.json: not valid JSON: ", 0), 0u);
  EXPECT_LT(message.size(), 300u);
}

TEST(InputJson, GettersNameTheFileAndTheKeyPath) {
  const nlohmann::json root = parse_json("config.json", R"({"n_positions": 1e99, "normalizer": [1, 2, 3],
      "model": {"vocab": {"a b": "x"}, "merges": [["a", 2]]}, "ok": 5, "neg": -3, "flag": true, "name": "gpt"})",
                                         1 << 20);
  const JsonValue config("config.json", root);
  EXPECT_EQ(error_of([&] { config.at("n_positions").integer<int>(1, 1 << 20); }),
            "config.json: n_positions: expected an integer in [1, 1048576], got 1e+99");
  EXPECT_EQ(error_of([&] { config.at_or_null("normalizer").expect_object_or_null(); }),
            "config.json: normalizer: expected an object or null, got an array of 3 elements");
  EXPECT_EQ(error_of([&] { config.at("model").at("vocab").at("a b").integer<int>(); }),
            "config.json: model.vocab['a b']: expected an integer in [-2147483648, 2147483647], got \"x\"");
  EXPECT_EQ(error_of([&] { config.at("model").at("merges").at(0).at(1).string(); }),
            "config.json: model.merges[0][1]: expected a string, got 2");
  EXPECT_EQ(error_of([&] { config.at("model").at("missing"); }), "config.json: no key 'model.missing'");
  EXPECT_EQ(error_of([&] { config.at("ok").integer<int>(6, 9); }),
            "config.json: ok: expected an integer in [6, 9], got 5");
  EXPECT_EQ(error_of([&] { config.at("neg").integer<unsigned>(); }),
            "config.json: neg: expected an integer in [0, 4294967295], got -3");
  EXPECT_EQ(config.at("neg").integer<int>(-3, 0), -3);
  EXPECT_EQ(config.at("ok").integer<std::uint64_t>(), 5u);
  EXPECT_EQ(config.at("ok").number(0, 10), 5.0);
  EXPECT_TRUE(config.at("flag").boolean());
  EXPECT_EQ(config.at("name").string(), "gpt");
  EXPECT_TRUE(config.at_or_null("absent").is_null());
  EXPECT_FALSE(config.has("absent"));
  EXPECT_EQ(describe_json(nlohmann::json(std::string(1000, 'x'))), "\"" + std::string(36, 'x') + "... (1002 bytes)");
}

TEST(InputJson, ReadJsonFileBoundsTheFileAndNamesIt) {
  const Tree tree;
  const std::string deep = tree.write("config.json", std::string(200000, '['));
  EXPECT_EQ(error_of([&] { read_json_file("load_hf_gpt2", deep, 1 << 20, "config file"); }),
            "load_hf_gpt2: '" + deep + "': the JSON nests deeper than 64 levels");
  const std::string big = tree.write("big.json", "");
  ASSERT_EQ(::truncate(big.c_str(), (1 << 20) + 1), 0);
  EXPECT_NE(error_of([&] {
              read_json_file("load_hf_gpt2", big, 1 << 20, "config file");
            }).find("is 1048577 bytes (1 MiB), more than the 1048576 bytes (1 MiB) a config file may be"),
            std::string::npos);
}

}  // namespace
