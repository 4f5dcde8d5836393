// Graphviz DOT of a tensor's backward graph: one box per op (its name and output shape), one
// ellipse per leaf that requires grad (a parameter or input), edges from inputs to the op
// that consumed them. Render with `dot -Tpng graph.dot -o graph.png`.
//
//   xgrad::write_file_atomically("graph.dot", [&](std::ostream& out) { out << xgrad::to_dot(loss, params); });
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <xgrad/core/tensor.hpp>

namespace xgrad {

// `names` labels leaves (e.g. a module's named_parameters()); other leaves that require grad
// are labelled "input". Leaves that do not require grad are not drawn.
template <class T>
std::string to_dot(const Tensor<T>& root, const std::vector<std::pair<std::string, Tensor<T>>>& names = {});

}  // namespace xgrad
