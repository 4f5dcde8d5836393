// Every entry of the gradcheck registry (registry.hpp, beside this file; each op's and module's
// entries are defined in tests/gradcheck/<folder>_<stem>.cpp) as a gtest of its own, at the default sizes:
// GradcheckList.Passes/matmul, GradcheckList.Passes/nn_MultiheadAttention, ... The ctest
// example_gradcheck runs the same registry through the gradcheck tool at other sizes.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "registry.hpp"
#include <xgrad/ops/ops.hpp>

namespace {

using xgrad::GradcheckEntry;

const std::vector<GradcheckEntry>& checks() {
  static const std::vector<GradcheckEntry> list = xgrad::gradcheck_entries();
  return list;
}

// "nn.TransformerEncoderLayer" -> "nn_TransformerEncoderLayer" (gtest names are [A-Za-z0-9_]).
std::string test_name(const std::string& check) {
  std::string name = check;
  for (char& ch : name)
    if (std::isalnum(static_cast<unsigned char>(ch)) == 0) ch = '_';
  return name;
}

class GradcheckList : public ::testing::TestWithParam<std::size_t> {};

TEST_P(GradcheckList, Passes) {
  const GradcheckEntry& check = checks()[GetParam()];
  const xgrad::GradcheckOutcome outcome =
      xgrad::run_gradcheck(check, xgrad::GradcheckSizes{}, xgrad::GradcheckOptions{});
  EXPECT_FALSE(outcome.result.inputs.empty()) << check.name << ": nothing was checked";
  EXPECT_TRUE(outcome.result.passed) << check.name << " (" << check.what << ") on " << outcome.shapes << "\n"
                                     << outcome.result.summary();
}

INSTANTIATE_TEST_SUITE_P(, GradcheckList, ::testing::Range<std::size_t>(0, checks().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return test_name(checks()[info.param].name);
                         });

// The same entries' second derivatives (gradgradcheck), as test_ops.py's test_fn_gradgrad: every op
// and module that supports_gradgrad can be differentiated twice (create_graph); the others are
// skipped. GradgradcheckList.Passes/matmul, ...
class GradgradcheckList : public ::testing::TestWithParam<std::size_t> {};

TEST_P(GradgradcheckList, Passes) {
  const GradcheckEntry& check = checks()[GetParam()];
  if (!check.supports_gradgrad) GTEST_SKIP() << check.name << " does not support second derivatives";
  const xgrad::GradcheckOutcome outcome =
      xgrad::run_gradgradcheck(check, xgrad::GradcheckSizes{}, xgrad::GradcheckOptions{});
  EXPECT_FALSE(outcome.result.inputs.empty()) << check.name << ": nothing was checked";
  EXPECT_TRUE(outcome.result.passed) << check.name << " (" << check.what << ") on " << outcome.shapes
                                     << ", second derivatives\n"
                                     << outcome.result.summary();
}

INSTANTIATE_TEST_SUITE_P(, GradgradcheckList, ::testing::Range<std::size_t>(0, checks().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return test_name(checks()[info.param].name);
                         });

// The tool selects checks by name: names are unique (also once made gtest names) and described.
TEST(GradcheckListNames, UniqueAndDescribed) {
  ASSERT_FALSE(checks().empty());
  std::set<std::string> names, test_names;
  for (const GradcheckEntry& check : checks()) {
    EXPECT_TRUE(names.insert(check.name).second) << "two checks named " << check.name;
    EXPECT_TRUE(test_names.insert(test_name(check.name)).second) << "two checks named like " << check.name;
    EXPECT_FALSE(check.what.empty()) << check.name << " has no description";
    EXPECT_TRUE(check.op) << check.name << " has no op";
    EXPECT_TRUE(check.sample_inputs) << check.name << " has no sample inputs";
    EXPECT_FALSE(check.group.empty()) << check.name << " has no group (only run-time entries have none)";
  }
}

// The ops come first, then the other folders' checks (core_checkpoint, the modules "nn.*"), each
// part by file name, each file's entries together (the order registry.hpp declares).
TEST(GradcheckListNames, OpsThenModulesFileByFile) {
  bool in_modules = false;
  std::set<std::string> finished_groups;
  std::string group;
  for (const GradcheckEntry& check : checks()) {
    const bool module = check.name.rfind("nn.", 0) == 0;
    EXPECT_TRUE(module || !in_modules) << "the op check " << check.name << " comes after a module's";
    in_modules = in_modules || module;
    EXPECT_EQ(module, check.group.rfind("nn_", 0) == 0) << check.name << " is registered by " << check.group;
    if (check.group != group) {
      const bool ops = check.group.rfind("ops_", 0) == 0;
      if (!group.empty() && ops == (group.rfind("ops_", 0) == 0)) {
        EXPECT_LT(group, check.group) << "the groups are not in order of their names";
      }
      EXPECT_TRUE(finished_groups.insert(group).second || group.empty()) << group << " appears twice";
      EXPECT_EQ(finished_groups.count(check.group), 0u) << check.group << "'s entries are not together";
      group = check.group;
    }
  }
}

// Every XGRAD_GRADCHECKS block of tests/gradcheck/ is named after its file, checks a file of the
// library (ops_matmul.cpp checks xgrad/ops/matmul.cpp, ops_attention_tiled.cpp a file of a folder of
// ops, xgrad/ops/attention/attention_tiled.cpp) and is registered (its object linked: a static
// library would drop it, the OBJECT library keeps it); every group of the registry comes from
// such a block.
// `file` in `folder` or in one of its subfolders (xgrad/ops/attention/).
bool checks_a_library_file(const std::filesystem::path& folder, const std::string& file) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(folder / file)) return true;
  if (!fs::is_directory(folder)) return false;
  for (const auto& sub : fs::directory_iterator(folder))
    if (sub.is_directory() && fs::is_regular_file(sub.path() / file)) return true;
  return false;
}

TEST(GradcheckListNames, EveryBlockInTheSourcesIsRegistered) {
  namespace fs = std::filesystem;
  const fs::path source = fs::path(XGRAD_SOURCE_DIR);
  const fs::path here = source / "tests" / "gradcheck";
  ASSERT_TRUE(fs::is_directory(here)) << here;
  std::map<std::string, std::size_t> entries_per_group;
  for (const GradcheckEntry& check : checks()) ++entries_per_group[check.group];

  const std::regex block(R"(^XGRAD_GRADCHECKS\((\w+)\))");
  std::set<std::string> blocks;
  for (const auto& file : fs::directory_iterator(here)) {
    if (file.path().extension() != ".cpp") continue;
    const std::string stem = file.path().stem().string();
    std::ifstream in(file.path());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, block)) continue;
      EXPECT_EQ(m[1].str(), stem) << file.path() << ": XGRAD_GRADCHECKS takes the file's stem";
      EXPECT_TRUE(blocks.insert(m[1].str()).second) << file.path() << ": a second XGRAD_GRADCHECKS block";
      const std::size_t cut = stem.find('_');
      EXPECT_TRUE(cut != std::string::npos &&
                  checks_a_library_file(source / "xgrad" / stem.substr(0, cut), stem.substr(cut + 1) + ".cpp"))
          << file.path() << ": checks no file of the library (named <folder>_<stem> after "
          << "xgrad/<folder>/<stem>.cpp or xgrad/<folder>/<subfolder>/<stem>.cpp)";
      EXPECT_EQ(entries_per_group.count(m[1].str()), 1u)
          << file.path() << ": its XGRAD_GRADCHECKS(" << m[1].str()
          << ") block is not registered (is its object linked? xgrad_testing must be an OBJECT library)";
    }
  }
  for (const auto& [group, count] : entries_per_group)
    EXPECT_EQ(blocks.count(group), 1u) << "the registry has " << count << " entries of group \"" << group
                                       << "\" but no file of tests/gradcheck has its block";
}

// The registry is test code: no source of the library defines or uses checks (libxgrad ships no
// test scaffolding, and core/ names no op or module file; scripts/check_layers.py checks the
// link level).
TEST(GradcheckListNames, TheLibraryHoldsNoChecks) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(XGRAD_SOURCE_DIR) / "xgrad";
  ASSERT_TRUE(fs::is_directory(root)) << root;
  for (const auto& file : fs::recursive_directory_iterator(root)) {
    if (file.path().extension() != ".cpp" && file.path().extension() != ".hpp") continue;
    std::ifstream in(file.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* name : {"XGRAD_GRADCHECKS", "gradcheck_registry", "GradcheckGroup", "gradcheck_entries"})
      EXPECT_EQ(text.find(name), std::string::npos) << file.path() << " mentions " << name;
  }
}

// A run-time entry: tanh(tanh(x)), x (B, L, D).
GradcheckEntry tanh_twice(const std::string& name) {
  using namespace xgrad::gradcheck_support;
  return {name, "tanh(tanh(x)), x (B, L, D)",
          [](const Inputs& in, const xgrad::SampleInput&) { return xgrad::tanh(xgrad::tanh(in[0])); },
          [](const Sizes& s) {
            return xgrad::SampleInput{{Maker(s.seed)({s.B, s.L, s.D})}};
          }};
}

TEST(GradcheckRegistry, RegisterAtRunTime) {
  const std::size_t before = xgrad::gradcheck_entries().size();
  EXPECT_EQ(before, checks().size());
  GradcheckEntry entry = tanh_twice("test.tanh_twice");
  entry.group = "ignored: run-time entries have no group";
  xgrad::register_gradcheck(entry);
  const std::vector<GradcheckEntry> after = xgrad::gradcheck_entries();
  ASSERT_EQ(after.size(), before + 1);
  EXPECT_EQ(after.back().name, "test.tanh_twice");
  EXPECT_EQ(after.back().group, "");
  EXPECT_TRUE(xgrad::run_gradcheck(after.back(), {}, {}).passed());
  EXPECT_TRUE(xgrad::run_gradgradcheck(after.back(), {}, {}).passed());

  // Taken names, no name, no op and no sample inputs are refused, and nothing is added.
  EXPECT_THROW(xgrad::register_gradcheck(tanh_twice("matmul")), std::invalid_argument);
  EXPECT_THROW(xgrad::register_gradcheck(tanh_twice("test.tanh_twice")), std::invalid_argument);
  EXPECT_THROW(xgrad::register_gradcheck(tanh_twice("")), std::invalid_argument);
  GradcheckEntry no_op = tanh_twice("test.no_op");
  no_op.op = nullptr;
  EXPECT_THROW(xgrad::register_gradcheck(no_op), std::invalid_argument);
  GradcheckEntry no_samples = tanh_twice("test.no_samples");
  no_samples.sample_inputs = nullptr;
  EXPECT_THROW(xgrad::register_gradcheck(no_samples), std::invalid_argument);
  EXPECT_EQ(xgrad::gradcheck_entries().size(), before + 1);
}

// First and second order are two runs over one entry (test_fn_grad and test_fn_gradgrad): the
// second checks the upstream gradient too, and is refused for an entry without
// supports_gradgrad, naming it.
TEST(GradcheckRegistry, FirstAndSecondOrderRuns) {
  GradcheckEntry entry = tanh_twice("test.first_order_only");
  const xgrad::GradcheckOutcome first = xgrad::run_gradcheck(entry, {}, {});
  const xgrad::GradcheckOutcome second = xgrad::run_gradgradcheck(entry, {}, {});
  EXPECT_TRUE(first.passed());
  EXPECT_TRUE(second.passed());
  EXPECT_EQ(first.shapes, "(2, 3, 4)");
  EXPECT_EQ(second.shapes, first.shapes);
  EXPECT_EQ(first.result.inputs.size(), 1u);
  EXPECT_EQ(second.result.inputs.size(), 2u);  // x and the upstream gradient

  entry.supports_gradgrad = false;
  EXPECT_TRUE(xgrad::run_gradcheck(entry, {}, {}).passed());
  try {
    xgrad::run_gradgradcheck(entry, {}, {});
    ADD_FAILURE() << "run_gradgradcheck ran an entry without supports_gradgrad";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("test.first_order_only"), std::string::npos) << e.what();
  }
}

// A module's sample: its inputs under their names, then its parameters, checked in place.
TEST(GradcheckRegistry, ModuleSamplesCheckTheParameters) {
  const std::vector<GradcheckEntry> all = xgrad::gradcheck_entries();
  const auto find = [&](const std::string& name) {
    for (const auto& e : all)
      if (e.name == name) return e;
    throw std::logic_error("no entry " + name);
  };
  const xgrad::GradcheckOutcome linear = xgrad::run_gradcheck(find("nn.Linear"), {}, {});
  ASSERT_EQ(linear.result.inputs.size(), 3u);
  EXPECT_EQ(linear.result.inputs[0].name, "input");
  EXPECT_EQ(linear.result.inputs[1].name, "weight");
  EXPECT_EQ(linear.result.inputs[2].name, "bias");
  EXPECT_EQ(linear.shapes, "(2, 3, 4) + 2 params (25 values)");
  const xgrad::GradcheckOutcome decoder = xgrad::run_gradcheck(find("nn.TransformerDecoderLayer"), {}, {});
  ASSERT_GE(decoder.result.inputs.size(), 3u);
  EXPECT_EQ(decoder.result.inputs[0].name, "tgt");
  EXPECT_EQ(decoder.result.inputs[1].name, "memory");
}

}  // namespace
