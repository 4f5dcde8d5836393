// Internal (engine.cpp): the engine's two modes, what its one traversal (engine.cpp, traverse)
// leaves open: Accumulate for backward(), Capture for autograd::grad; and SetAsideGrads, the
// leaves' grad() both keep aside while a pass collects its own gradients. traverse's comment
// lists what a mode answers.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include <xgrad/core/engine_access.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad::detail {

// Leaves whose grad() is set aside while a pass collects that pass's contributions alone in its
// place: for a leaf's register_hook hooks (they see this backward's sum, not the accumulated
// grad()), and for autograd::grad, which must leave every grad() as it was. Whatever is still set
// aside when this goes away (a backward that threw, a leaf autograd::grad was not asked for) gets
// its old grad() back. Each leaf is held until then: a leaf only the graph holds (made inside the
// differentiated function) is freed with the graph at the end of a pass that does not retain it,
// before this goes away.
template <class T>
class SetAsideGrads {
 public:
  SetAsideGrads() = default;
  SetAsideGrads(const SetAsideGrads&) = delete;
  SetAsideGrads& operator=(const SetAsideGrads&) = delete;
  ~SetAsideGrads() {
    for (auto& [leaf, entry] : entries_) restore(*leaf, entry);
  }
  void add(const std::shared_ptr<Node<T>>& handle) {
    Node<T>* leaf = handle.get();
    if (entries_.count(leaf)) return;
    Entry& e = entries_[leaf];
    e.held = handle;
    e.grad = std::move(leaf->grad);
    e.has_grad = leaf->has_grad;
    e.graph = std::move(E<T>::grad_graph(*leaf));
    E<T>::grad_graph(*leaf) = nullptr;
    leaf->grad = detail::no_array<T>();
    leaf->has_grad = false;
  }
  bool contains(Node<T>* leaf) const { return entries_.count(leaf) != 0; }
  // Moves this pass's gradient of `leaf` into `out` (and its history, under create_graph, into
  // `graph`; false if it got none) and gives the leaf its own gradient back.
  bool take(Node<T>* leaf, Array<T>& out, std::shared_ptr<Node<T>>& graph) {
    auto it = entries_.find(leaf);
    const bool got = leaf->has_grad;
    if (got) out = std::move(leaf->grad);
    graph = std::move(E<T>::grad_graph(*leaf));
    restore(*leaf, it->second);
    entries_.erase(it);
    return got;
  }

 private:
  struct Entry {
    std::shared_ptr<Node<T>> held;
    Array<T> grad = detail::no_array<T>();
    bool has_grad = false;
    std::shared_ptr<Node<T>> graph;
  };
  static void restore(Node<T>& leaf, Entry& e) {
    leaf.grad = std::move(e.grad);
    leaf.has_grad = e.has_grad;
    E<T>::grad_graph(leaf) = std::move(e.graph);
  }
  std::unordered_map<Node<T>*, Entry> entries_;
};

// backward(): every node runs; gradients accumulate into the leaves' grad(). A leaf with hooks is
// complete once the last node that feeds it has run: its register_hook hooks then see this
// backward's sum (its grad() is set aside until then), and its post-accumulate-grad hooks run.
template <class T>
class Accumulate {
 public:
  void at_root_leaf(Node<T>& leaf, const std::shared_ptr<Node<T>>& handle, Array<T>&& g,
                    std::shared_ptr<Node<T>> graph) {
    if (!E<T>::grad_hooks(leaf).empty()) run_grad_hooks(leaf, g, graph);
    accumulate(leaf, std::move(g), std::move(graph));
    run_post_accumulate_grad_hooks(leaf, handle);
  }
  void plan(const std::vector<Node<T>*>& order) {
    std::unordered_map<const Node<T>*, std::size_t> last;  // hooked leaf -> index of its last consumer
    std::size_t k = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it, ++k)
      for (std::size_t i = 0; i < (*it)->inputs.size(); ++i)
        if (Node<T>* in = E<T>::edge(**it, i); in && in->is_leaf && in->requires_grad && hooked(*in)) last[in] = k;
    if (last.empty()) return;
    hooks_after_.resize(order.size());
    k = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it, ++k)
      for (std::size_t i = 0; i < (*it)->inputs.size(); ++i) {
        const std::shared_ptr<Node<T>>& in = E<T>::edge_handle(**it, i);
        auto found = in ? last.find(in.get()) : last.end();
        if (found != last.end() && found->second == k) {
          hooks_after_[k].push_back(in);
          if (!E<T>::grad_hooks(*in).empty()) set_aside_.add(in);
          last.erase(found);  // listed once even if the node uses it twice
        }
      }
  }
  bool runs(std::size_t) const { return true; }
  bool requested(const Node<T>&) const { return false; }
  void at_node(Node<T>&, bool) {}
  void after(std::size_t k) {
    if (hooks_after_.empty()) return;
    for (const auto& leaf : hooks_after_[k]) {
      Array<T> g = detail::no_array<T>();
      std::shared_ptr<Node<T>> graph;
      if (set_aside_.contains(leaf.get()) && set_aside_.take(leaf.get(), g, graph)) {
        run_grad_hooks(*leaf, g, graph);
        accumulate(*leaf, std::move(g), std::move(graph));
      }
      run_post_accumulate_grad_hooks(*leaf, leaf);
    }
  }
  void finish() {}

 private:
  static bool hooked(Node<T>& leaf) {
    return !E<T>::post_accumulate_grad_hooks(leaf).empty() || !E<T>::grad_hooks(leaf).empty();
  }

  std::vector<std::vector<std::shared_ptr<Node<T>>>> hooks_after_;  // [k]: the hooked leaves the k-th node completes
  SetAsideGrads<T> set_aside_;
};

// autograd::grad: only the nodes on a path to a requested input run their backward; the requested
// inputs' gradients go to grads (one slot per distinct input), no grad() changes and no
// post-accumulate-grad hook runs.
template <class T>
class Capture {
 public:
  std::unordered_map<const Node<T>*, std::size_t> slot;  // requested input -> index in grads
  std::vector<Array<T>> grads;
  std::vector<std::shared_ptr<Node<T>>> graphs;  // under create_graph: each gradient's history
  std::vector<bool> has;

  void at_root_leaf(Node<T>& leaf, const std::shared_ptr<Node<T>>&, Array<T>&& g, std::shared_ptr<Node<T>> graph) {
    auto found = slot.find(&leaf);
    if (found == slot.end()) return;
    if (!E<T>::grad_hooks(leaf).empty()) run_grad_hooks(leaf, g, graph);
    add(found->second, std::move(g), std::move(graph));
  }
  void plan(const std::vector<Node<T>*>& order) {
    std::unordered_map<const Node<T>*, bool> needed;  // non-leaf -> on a path to a requested input
    std::vector<char> runs_post(order.size(), 0);
    for (std::size_t i = 0; i < order.size(); ++i) {  // post-order: inputs first
      bool any = false;
      for (std::size_t j = 0; j < order[i]->inputs.size(); ++j) {
        const Node<T>* in = E<T>::edge(*order[i], j);
        if (!in || !in->requires_grad) continue;
        any = any || (in->is_leaf ? slot.count(in) != 0 : needed[in]);
      }
      runs_post[i] = any;
      needed[order[i]] = any || slot.count(order[i]) != 0;
    }
    runs_.assign(runs_post.rbegin(), runs_post.rend());
    // Every leaf a running backward can write to gets its grad() set aside.
    for (std::size_t i = 0; i < order.size(); ++i)
      if (runs_post[i])
        for (std::size_t j = 0; j < order[i]->inputs.size(); ++j)
          if (const auto& in = E<T>::edge_handle(*order[i], j); in && in->is_leaf && in->requires_grad)
            set_aside_.add(in);
  }
  bool runs(std::size_t k) const { return runs_[k] != 0; }
  bool requested(const Node<T>& node) const { return slot.count(&node) != 0; }
  void at_node(Node<T>& node, bool run) {
    if (auto found = slot.find(&node); found != slot.end())
      add(found->second, run ? copy_array(node.grad, "autograd::grad") : std::move(node.grad), E<T>::grad_graph(node));
  }
  void after(std::size_t) {}
  void finish() {
    for (const auto& [leaf, s] : slot) {
      Node<T>* l = const_cast<Node<T>*>(leaf);
      Array<T> g = detail::no_array<T>();
      std::shared_ptr<Node<T>> graph;
      if (l->is_leaf && set_aside_.contains(l) && set_aside_.take(l, g, graph)) {
        if (!E<T>::grad_hooks(*l).empty()) run_grad_hooks(*l, g, graph);
        add(s, std::move(g), std::move(graph));
      }
    }
  }

 private:
  void add(std::size_t s, Array<T>&& g, std::shared_ptr<Node<T>> graph) {
    if (graph && graphs[s]) {
      const GradGuard enabled(true);
      graphs[s] = detail::add_gradients(Tensor<T>(graphs[s]), Tensor<T>(graph)).node();
    } else if (graph) {
      graphs[s] = std::move(graph);
    }
    if (!has[s]) {
      grads[s] = std::move(g);
      has[s] = true;
    } else {
      grads[s] += g;
    }
  }
  std::vector<char> runs_;  // [k]: whether the k-th node to run has an input on a path to a requested one
  SetAsideGrads<T> set_aside_;
};

}  // namespace xgrad::detail
