// The output rule (docs/reliability.md, "Output rule"): every file xgrad and its example programs
// write goes through the output layer, xgrad/serialize/atomic_file (write_file_atomically: a
// temporary file renamed into place, special files refused; AppendOnlyFile for the Trainer's CSV).
// The scan below finds a writer anywhere else -- std::ofstream, std::fstream, fopen/popen/fdopen
// with a mode that writes, open(2) with O_CREAT/O_WRONLY/O_RDWR/O_APPEND/O_TRUNC, creat(2), and
// writes into a FILE* other than stdout/stderr -- and is itself checked on a tree with planted
// violations, so that a scan that finds nothing cannot pass for a clean tree.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// The files allowed to write by themselves, and why.
const std::map<std::string, std::string> kAllowed = {
    {"xgrad/serialize/atomic_file.cpp", "the output layer itself: the temporary file, its rename, AppendOnlyFile"},
};

// What a writer looks like, one regular expression per kind.
const std::vector<std::pair<std::string, std::regex>>& writer_patterns() {
  static const std::vector<std::pair<std::string, std::regex>> patterns = {
      {"std::ofstream / std::fstream", std::regex(R"(\b(o?fstream|basic_o?fstream)\b)")},
      {"fopen/popen/fdopen with a mode that writes",
       std::regex(R"(\b(fopen|freopen|fdopen|popen)\s*\([^;]*"[^"]*[wa+][^"]*")")},
      {"open(2) for writing", std::regex(R"(\bO_(CREAT|WRONLY|RDWR|APPEND|TRUNC)\b)")},
      {"creat(2)", std::regex(R"(\bcreat\s*\()")},
      {"a write into a FILE*", std::regex(R"(\b(fwrite|fputs|fputc|putc)\s*\((?![^;]*\b(stdout|stderr)\s*\)))")},
      {"fprintf into a FILE*", std::regex(R"(\bfprintf\s*\(\s*(?!(std::)?(stdout|stderr)\b))")},
  };
  return patterns;
}

// Whether a line holds a word that every pattern of writer_patterns() needs.
bool may_write(const std::string& code) {
  for (const char* word : {"fstream", "open", "O_", "creat", "fwrite", "fput", "putc", "fprintf"})
    if (code.find(word) != std::string::npos) return true;
  return false;
}

// A line without its // comment and string-free enough for the patterns (block comments are
// dropped by the caller).
std::string code_of(const std::string& line) {
  bool quoted = false;
  for (std::size_t i = 0; i + 1 < line.size(); ++i) {
    if (line[i] == '"' && (i == 0 || line[i - 1] != '\\')) quoted = !quoted;
    if (!quoted && line[i] == '/' && line[i + 1] == '/') return line.substr(0, i);
  }
  return line;
}

// "path:line: kind: text" for each writer in the C++ sources under root/xgrad and root/examples
// that is not in `allowed` (paths relative to root).
std::vector<std::string> writers_outside_the_output_layer(const fs::path& root,
                                                          const std::map<std::string, std::string>& allowed,
                                                          std::size_t* scanned = nullptr) {
  std::vector<std::string> found;
  for (const char* top : {"xgrad", "examples"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".h" && ext != ".cc")) continue;
      const std::string rel = fs::relative(entry.path(), root).generic_string();
      if (allowed.count(rel)) continue;
      if (scanned) ++*scanned;
      std::ifstream in(entry.path());
      bool in_block_comment = false;
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::string code = line;
        if (in_block_comment) {
          const auto end = code.find("*/");
          if (end == std::string::npos) continue;
          code = code.substr(end + 2);
          in_block_comment = false;
        }
        code = code_of(code);
        if (code.find("#include") != std::string::npos) continue;  // <fstream> may be included to read
        if (const auto begin = code.find("/*"); begin != std::string::npos) {
          const auto end = code.find("*/", begin + 2);
          in_block_comment = end == std::string::npos;
          code = code.substr(0, begin) + (in_block_comment ? "" : code.substr(end + 2));
        }
        if (!may_write(code)) continue;  // (std::regex is slow: most lines skip it)
        for (const auto& [kind, pattern] : writer_patterns())
          if (std::regex_search(code, pattern))
            found.push_back(rel + ":" + std::to_string(n) + ": " + kind + ": " + line);
      }
    }
  }
  return found;
}

TEST(OutputRule, EveryWriteOfTheLibraryAndTheExamplesGoesThroughTheOutputLayer) {
  std::size_t scanned = 0;
  const auto found = writers_outside_the_output_layer(XGRAD_SOURCE_DIR, kAllowed, &scanned);
  EXPECT_GT(scanned, 100u);
  for (const std::string& f : found)
    ADD_FAILURE() << "writes outside the output layer (xgrad/serialize/atomic_file.hpp: write_file_atomically, "
                     "AppendOnlyFile): "
                  << f;
  for (const auto& [path, why] : kAllowed)
    EXPECT_TRUE(fs::exists(fs::path(XGRAD_SOURCE_DIR) / path)) << "the allow-list names a missing file: " << path;
}

// The scan on a tree of its own: each kind of writer planted is found, at its line; comments,
// reading, the console and an allowed file are not.
TEST(OutputRule, TheScanFindsPlantedWriters) {
  const fs::path root = fs::temp_directory_path() / ("xgrad_output_rule_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "xgrad" / "io");
  fs::create_directories(root / "examples" / "support");
  std::ofstream(root / "xgrad" / "io" / "clean.cpp") << "#include <fstream>\n"
                                                        "// std::ofstream in a comment\n"
                                                        "/* a block comment\n"
                                                        "   fopen(\"x\", \"w\") in it\n"
                                                        "   std::ofstream out; */\n"
                                                        "std::ifstream in(path);\n"
                                                        "FILE* p = popen(\"ls\", \"r\");\n"
                                                        "std::fprintf(stderr, \"%s\\n\", m);\n"
                                                        "std::fputs(\"x\", stdout);\n"
                                                        "int fd = ::open(path, O_RDONLY | O_NONBLOCK);\n"
                                                        "const char* url = \"http://example.org\";\n";
  std::ofstream(root / "xgrad" / "io" / "allowed.cpp") << "std::ofstream out(path);\n";
  std::ofstream(root / "xgrad" / "io" / "planted.cpp") << "int x;\n"
                                                          "std::ofstream out(path, std::ios::trunc);\n"
                                                          "FILE* f = std::fopen(path.c_str(), \"wb\");\n"
                                                          "int fd = ::open(path, O_WRONLY | O_CREAT, 0644);\n"
                                                          "std::fprintf(f, \"%d\\n\", 1);\n"
                                                          "fwrite(buf, 1, n, f);\n";
  std::ofstream(root / "examples" / "support" / "planted.hpp") << "  std::fstream log(\"x.log\");  // rw\n"
                                                                  "auto* a = fopen(p, \"a\");\n";
  const auto found = writers_outside_the_output_layer(root, {{"xgrad/io/allowed.cpp", "test"}});
  std::vector<std::string> where;
  for (const std::string& f : found) where.push_back(f.substr(0, f.find(": ", f.find(':'))));
  std::sort(where.begin(), where.end());
  EXPECT_EQ(where,
            (std::vector<std::string>{"examples/support/planted.hpp:1", "examples/support/planted.hpp:2",
                                      "xgrad/io/planted.cpp:2", "xgrad/io/planted.cpp:3", "xgrad/io/planted.cpp:4",
                                      "xgrad/io/planted.cpp:5", "xgrad/io/planted.cpp:6"}))
      << ::testing::PrintToString(found);
  // Without its allow-list entry, the allowed file is found too: the scan fails on it.
  EXPECT_EQ(writers_outside_the_output_layer(root, {}).size(), found.size() + 1);
  fs::remove_all(root);
}

}  // namespace
