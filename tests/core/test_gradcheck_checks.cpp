// Every entry of the gradcheck list (examples/support/gradcheck_checks.cpp, the list the gradcheck
// tool runs) as a gtest of its own, at the default sizes: GradcheckList.Passes/matmul,
// GradcheckList.Passes/nn_MultiheadAttention, ... The ctest example_gradcheck runs the same list
// through the tool at other sizes.
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "support/gradcheck_checks.hpp"

namespace {

using gradcheck_checks::Check;

const std::vector<Check>& checks() {
  static const std::vector<Check> list = gradcheck_checks::all_checks();
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
  const Check& check = checks()[GetParam()];
  const gradcheck_checks::Outcome outcome = check.run(gradcheck_checks::Sizes{}, xgrad::GradcheckOptions{});
  EXPECT_FALSE(outcome.result.inputs.empty()) << check.name << ": nothing was checked";
  EXPECT_TRUE(outcome.result.passed) << check.name << " (" << check.what << ") on " << outcome.shapes << "\n"
                                     << outcome.result.summary();
}

INSTANTIATE_TEST_SUITE_P(, GradcheckList, ::testing::Range<std::size_t>(0, checks().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return test_name(checks()[info.param].name);
                         });

// The tool selects checks by name: names are unique (also once made gtest names) and described.
TEST(GradcheckListNames, UniqueAndDescribed) {
  std::set<std::string> names, test_names;
  for (const Check& check : checks()) {
    EXPECT_TRUE(names.insert(check.name).second) << "two checks named " << check.name;
    EXPECT_TRUE(test_names.insert(test_name(check.name)).second) << "two checks named like " << check.name;
    EXPECT_FALSE(check.what.empty()) << check.name << " has no description";
    EXPECT_TRUE(check.run) << check.name << " has no function";
  }
  EXPECT_GE(checks().size(), 72u);  // every op and module: the list only grows
}

}  // namespace
