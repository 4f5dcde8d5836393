// to_dot draws the backward graph: ops with shapes, parameters by name, shared nodes once.
#include "test_util.hpp"

#include <xgrad/core/graphviz.hpp>

using namespace xgrad;

namespace {
std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST(ToDot, DrawsOpsParametersAndEdges) {
  auto w = ones<float>({2, 3}, true);
  auto x = ones<float>({2, 3}, true);
  auto c = ones<float>({2, 3});  // a constant: not drawn
  auto h = w * x;
  auto y = sum(h + h * c);  // h is used twice: drawn once, with two edges out
  const std::string dot = to_dot(y, {{"encoder.weight", w}});
  EXPECT_EQ(dot.rfind("digraph backward {", 0), 0u);
  EXPECT_NE(dot.find("encoder.weight\\n(2, 3)"), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"input\\n(2, 3)\""), std::string::npos) << dot;
  EXPECT_EQ(count(dot, "label=\"mul\\n(2, 3)\""), 2u) << dot;   // w*x and h*c
  EXPECT_EQ(count(dot, "label=\"sum\\n()\""), 1u) << dot;
  EXPECT_EQ(count(dot, "label=\"add\\n(2, 3)\""), 1u) << dot;
  EXPECT_EQ(count(dot, "constant"), 0u) << dot;
  // Edges: w->mul, x->mul, mul->add, mul->mul2, mul2->add, add->sum
  EXPECT_EQ(count(dot, " -> "), 6u) << dot;
}
