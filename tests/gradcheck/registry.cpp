// The registry of gradient checks: the list of check files (see registry.hpp). The builders the
// check files share are in support.cpp.
#include "registry.hpp"

#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>

// Every file with an XGRAD_GRADCHECKS block, in the order gradcheck_entries() lists their
// entries: the ops in the order of ops/ops.hpp, then the modules. Calling each registration
// function is what links the file into a program that asks for the entries (a static library
// drops an object nothing references). A new file with checks adds its line here.
#define XGRAD_GRADCHECK_FILES(X) \
  X(ops_elementwise)             \
  X(ops_reduction)               \
  X(ops_shape)                   \
  X(ops_indexing)                \
  X(ops_matmul)                  \
  X(ops_linear_gelu)             \
  X(ops_softmax)                 \
  X(ops_layer_norm)              \
  X(ops_rotary_embedding)        \
  X(ops_dropout)                 \
  X(ops_attention)               \
  X(ops_attention_tiled)         \
  X(ops_loss)                    \
  X(ops_triangular)              \
  X(ops_sorting)                 \
  X(nn_linear)                   \
  X(nn_layer_norm)               \
  X(nn_activation)               \
  X(nn_dropout)                  \
  X(nn_embedding)                \
  X(nn_multihead_attention)      \
  X(nn_transformer)              \
  X(nn_sequential)

namespace xgrad {

namespace detail {
#define XGRAD_DECLARE_GRADCHECKS(name) void register_gradchecks_##name(GradcheckGroup& checks);
XGRAD_GRADCHECK_FILES(XGRAD_DECLARE_GRADCHECKS)
#undef XGRAD_DECLARE_GRADCHECKS
}  // namespace detail

namespace {

void check_new_entry(const GradcheckEntry& entry, std::set<std::string>& names, const char* who) {
  if (entry.name.empty()) throw std::invalid_argument(std::string(who) + ": a gradcheck entry needs a name");
  if (!entry.run)
    throw std::invalid_argument(std::string(who) + ": the gradcheck entry \"" + entry.name + "\" has no function");
  if (!names.insert(entry.name).second)
    throw std::invalid_argument(std::string(who) + ": two gradcheck entries are named \"" + entry.name + "\"" +
                                (entry.group.empty() ? "" : " (the second in " + entry.group + ")"));
}

struct Registry {
  std::mutex mutex;
  std::vector<GradcheckEntry> entries;
  std::set<std::string> names;

  Registry() {
    std::vector<GradcheckGroup> groups;
#define XGRAD_RUN_GRADCHECKS(name)             \
  {                                            \
    GradcheckGroup group(#name);               \
    detail::register_gradchecks_##name(group); \
    groups.push_back(std::move(group));        \
  }
    XGRAD_GRADCHECK_FILES(XGRAD_RUN_GRADCHECKS)
#undef XGRAD_RUN_GRADCHECKS
    for (auto& g : groups) {
      if (g.entries().empty())
        throw std::logic_error("gradcheck registry: the file " + g.group() + " registers no checks");
      for (auto& entry : g.entries()) {
        check_new_entry(entry, names, "gradcheck registry");
        entries.push_back(std::move(entry));
      }
    }
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::vector<GradcheckEntry> gradcheck_entries() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.entries;
}

void register_gradcheck(GradcheckEntry entry) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  entry.group.clear();
  check_new_entry(entry, r.names, "register_gradcheck");
  r.entries.push_back(std::move(entry));
}

}  // namespace xgrad
