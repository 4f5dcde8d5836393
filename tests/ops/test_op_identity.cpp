// Every op names itself once: its name is written in the OpKind list (xgrad/core/op_kinds.hpp)
// and nowhere else. An op opens its OpScope (xgrad/ops/op_scope.hpp) with its kind and reaches
// its name through it (op.name()) for its profile range, its node, its trace record and its
// messages; so no file under xgrad/ops writes an op's name as a string literal. Three uses of
// such a string are not an op's name: a comparison with an argument's value (`reduction ==
// "mean"`, `approximate == "tanh"`), a string parameter's default (`const std::string& reduction =
// "mean"`) and the name of a traced argument (`XGRAD_OP_NOTE(op, {"max", hi})`).
#include "test_util.hpp"

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// One line without its // comment (a // inside a string literal is kept).
std::string code_of(const std::string& line) {
  bool in_string = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && in_string) {
      ++i;
    } else if (line[i] == '"') {
      in_string = !in_string;
    } else if (!in_string && line.compare(i, 2, "//") == 0) {
      return line.substr(0, i);
    }
  }
  return line;
}

// The names of the OpKind list: X(name) in XGRAD_OP_KINDS (outside comments).
std::set<std::string> op_names() {
  std::istringstream lines(read(fs::path(XGRAD_SOURCE_DIR) / "xgrad/core/op_kinds.hpp"));
  std::set<std::string> names;
  const std::regex entry(R"(X\((\w+)\))");
  for (std::string line; std::getline(lines, line);) {
    const std::string code = code_of(line);
    for (std::sregex_iterator it(code.begin(), code.end(), entry), end; it != end; ++it) names.insert((*it)[1]);
  }
  return names;
}

// The string literals of `text` (one line per entry, "LINE: code") that are exactly an op's name
// and are not an argument's value.
std::vector<std::string> literal_names(const std::string& text, const std::set<std::string>& names) {
  static const std::regex literal(R"re("((?:[^"\\]|\\.)*)")re");
  static const std::regex value_before(R"((==|!=|std::string&\s*\w+\s*=|\{)\s*$)");
  std::vector<std::string> found;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    const std::string code = code_of(line);
    for (std::sregex_iterator it(code.begin(), code.end(), literal), end; it != end; ++it) {
      if (names.count((*it)[1]) == 0) continue;
      if (std::regex_search(code.substr(0, static_cast<std::size_t>(it->position())), value_before)) continue;
      found.push_back(std::to_string(n) + ": " + line);
    }
  }
  return found;
}

// The literal names of XGRAD_PROFILE_OP ranges: ops that time themselves without a kind.
std::vector<std::string> profiled_literals(const std::string& text) {
  static const std::regex range(R"re(XGRAD_PROFILE_OP\("(\w+)"\))re");
  std::vector<std::string> found;
  for (std::sregex_iterator it(text.begin(), text.end(), range), end; it != end; ++it) found.push_back((*it)[1]);
  return found;
}

// Ops that time themselves under a name of their own and are not (yet) OpKinds, each listed
// with its file: the fused kernels and the ops that return indices, which no exporter writes.
// Moving one into the OpKind list needs a row in onnx's op table and a sample in
// tests/onnx/test_op_table.cpp; its entry here then goes.
const std::set<std::string> kProfiledWithoutKind = {
    "add_layer_norm",   // ops/layer_norm.cpp
    "add_rms_norm",     // ops/rms_norm.cpp
    "linear_gelu",      // ops/linear_gelu.cpp
    "lora_linear",      // ops/lora_linear.cpp
    "silu_mul",         // ops/elementwise.cpp
    "argmax",           // ops/sorting.cpp
    "multinomial",      // ops/multinomial.cpp
    "attention",        // ops/attention/attention.cpp: detail::attention, under MultiheadAttention
    "attention_heads",  // ops/attention/attention.cpp: detail::attention_heads
};

TEST(OpIdentity, TheScanFindsAnOpNameWrittenAsALiteral) {
  const std::set<std::string> names = {"tril", "mean", "tanh"};
  EXPECT_EQ(literal_names("  XGRAD_PROFILE_OP(\"tril\");\n", names).size(), 1u);
  EXPECT_EQ(literal_names("  return make_result<T>(\"tril\", std::move(y), {a}, f);\n", names).size(), 1u);
  EXPECT_EQ(literal_names("  Array<T> y = empty_array<T>(shape, \"tril\");  // \"tril\"\n", names).size(), 1u);
  EXPECT_TRUE(literal_names("  if (reduction == \"mean\") return;\n", names).empty());
  EXPECT_TRUE(literal_names("  const bool t = approximate != \"tanh\";\n", names).empty());
  EXPECT_TRUE(literal_names("Tensor<T> f(const std::string& reduction = \"mean\");\n", names).empty());
  EXPECT_TRUE(literal_names("  XGRAD_OP_NOTE(op, {\"mean\", m});\n", names).empty());
  EXPECT_TRUE(literal_names("  // XGRAD_PROFILE_OP(\"tril\")\n", names).empty());
  EXPECT_TRUE(literal_names("  XGRAD_CHECK(ok, \"tril: bad\");\n", names).empty());
  EXPECT_EQ(profiled_literals("XGRAD_PROFILE_OP(\"argmax\"); XGRAD_PROFILE_OP(\"x\");"),
            (std::vector<std::string>{"argmax", "x"}));
}

TEST(OpIdentity, EveryOpNamesItselfOnce) {
  const std::set<std::string> names = op_names();
  ASSERT_GT(names.size(), 50u);
  EXPECT_EQ(names.count("cross_entropy"), 1u);
  EXPECT_EQ(names.count("name"), 0u);  // the list's comment, X(name), is no op
  const fs::path root = fs::path(XGRAD_SOURCE_DIR) / "xgrad/ops";
  std::size_t files = 0;
  std::set<std::string> profiled;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp")) continue;
    ++files;
    const std::string rel = fs::relative(entry.path(), fs::path(XGRAD_SOURCE_DIR)).generic_string();
    const std::string text = read(entry.path());
    for (const std::string& hit : literal_names(text, names))
      ADD_FAILURE() << rel << ":" << hit << "\n  writes an op's name: open its OpScope (xgrad/ops/op_scope.hpp) "
                    << "with its OpKind and use op.name()";
    for (const std::string& name : profiled_literals(text)) {
      profiled.insert(name);
      EXPECT_EQ(kProfiledWithoutKind.count(name), 1u)
          << rel << ": XGRAD_PROFILE_OP(\"" << name << "\"): an op opens its OpScope with its OpKind instead";
    }
  }
  EXPECT_GT(files, 15u);
  for (const std::string& name : kProfiledWithoutKind)
    EXPECT_EQ(profiled.count(name), 1u) << "'" << name << "' is no longer profiled by name: drop it from the list";
}

}  // namespace
