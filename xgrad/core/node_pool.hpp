// Internal (graph.cpp, history.cpp, tensor.cpp): the allocator every graph node is made with,
// std::allocate_shared<Node<T>>(NodeAllocator<Node<T>>(), ...).
//
// A training step makes a few hundred nodes (each one block: the Node and its reference counts)
// and frees them all at the end of backward, far more of one size than glibc's per-thread cache
// keeps (7 blocks per size); the rest go through the locked arena. NodeAllocator keeps up to
// kNodeBlocks freed blocks per thread and block type for the next step, when the array cache is on
// (allocator.hpp: off under AddressSanitizer, with XGRAD_ARRAY_CACHE=0 or set_array_cache(false)).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

#include <xgrad/backend/allocator.hpp>

namespace xgrad::detail {

constexpr std::size_t kNodeBlocks = 4096;  // per thread and block type: a few MiB at most (32 KiB of list)

// One thread's free blocks of type U. `gone` is trivially destructible, so a block freed while
// the thread's thread_local objects are being destroyed goes straight to operator delete. The
// list's room is reserved when it is made, and deallocate (called from destructors) only fills
// that room: it never allocates. Made without room (no memory then), it keeps no block.
template <class U>
struct NodeBlocks {
  std::vector<void*> free;
  static thread_local bool gone;
  NodeBlocks() noexcept {
    try {
      free.reserve(kNodeBlocks);
    } catch (const std::bad_alloc&) {  // keep none: every freed block goes to operator delete
    }
  }
  ~NodeBlocks() {
    gone = true;
    for (void* p : free) ::operator delete(p);
  }
  static NodeBlocks* get() {
    if (gone) return nullptr;
    thread_local NodeBlocks blocks;
    return &blocks;
  }
};
template <class U>
thread_local bool NodeBlocks<U>::gone = false;

template <class U>
struct NodeAllocator {
  using value_type = U;
  static_assert(alignof(U) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "NodeAllocator: over-aligned type");

  NodeAllocator() = default;
  template <class V>
  NodeAllocator(const NodeAllocator<V>&) noexcept {}

  U* allocate(std::size_t n) {
    if (n == 1 && array_cache_enabled())
      if (NodeBlocks<U>* b = NodeBlocks<U>::get(); b != nullptr && !b->free.empty()) {
        void* p = b->free.back();
        b->free.pop_back();
        return static_cast<U*>(p);
      }
    return static_cast<U*>(::operator new(n * sizeof(U)));
  }
  void deallocate(U* p, std::size_t n) noexcept {
    if (n == 1 && array_cache_enabled())
      if (NodeBlocks<U>* b = NodeBlocks<U>::get(); b != nullptr && b->free.size() < b->free.capacity()) {
        b->free.push_back(p);  // within the reserved room: allocates nothing
        return;
      }
    ::operator delete(p);
  }
  template <class V>
  bool operator==(const NodeAllocator<V>&) const noexcept { return true; }
  template <class V>
  bool operator!=(const NodeAllocator<V>&) const noexcept { return false; }
};

}  // namespace xgrad::detail
