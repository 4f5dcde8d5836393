#include <xgrad/core/graphviz.hpp>

#include <sstream>
#include <unordered_map>

namespace xgrad {

template <class T>
std::string to_dot(const Tensor<T>& root, const std::vector<std::pair<std::string, Tensor<T>>>& names) {
  XGRAD_CHECK(root.defined(), "to_dot: the tensor is undefined");
  std::unordered_map<const Node<T>*, std::string> leaf_name;
  for (const auto& [name, t] : names)
    if (t.defined()) leaf_name[t.node().get()] = name;

  std::ostringstream s;
  s << "digraph backward {\n  rankdir=BT;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  std::unordered_map<const Node<T>*, std::size_t> id;  // also the visited set
  std::vector<const Node<T>*> stack{root.node().get()};
  id[root.node().get()] = 0;
  while (!stack.empty()) {
    const Node<T>* n = stack.back();
    stack.pop_back();
    const std::size_t me = id.at(n);
    if (n->is_leaf) {
      const auto it = leaf_name.find(n);
      const bool is_param = it != leaf_name.end();
      s << "  n" << me << " [shape=ellipse, style=filled, fillcolor=\"" << (is_param ? "lightblue" : "lightgrey")
        << "\", label=\"" << (is_param ? it->second : std::string(n->requires_grad ? "input" : "constant")) << "\\n"
        << shape_str(n->value.shape()) << "\"];\n";
      continue;
    }
    s << "  n" << me << " [shape=box, label=\"" << n->op << "\\n" << shape_str(n->value.shape()) << "\"];\n";
    for (const auto& in : n->inputs) {
      if (!in || !in->requires_grad) continue;  // constants take no part in backward
      auto [it, inserted] = id.emplace(in.get(), id.size());
      if (inserted) stack.push_back(in.get());
      s << "  n" << it->second << " -> n" << me << ";\n";
    }
  }
  s << "}\n";
  return s.str();
}

template std::string to_dot<float>(const Tensor<float>&, const std::vector<std::pair<std::string, Tensor<float>>>&);
template std::string to_dot<double>(const Tensor<double>&, const std::vector<std::pair<std::string, Tensor<double>>>&);

}  // namespace xgrad
