// The registry of gradient checks (registry.hpp): the groups the XGRAD_GRADCHECKS blocks
// register, the run-time entries, and the two runs over an entry. The builders the check files
// share are in support.cpp.
#include "registry.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>

namespace xgrad {

namespace {

struct Group {
  std::string name;
  std::vector<GradcheckEntry> (*entries)();
};

// The groups registered by the static objects of the check files, in link order (construct on
// first use: the objects of other files may run before any other static of this one).
std::vector<Group>& registered_groups() {
  static std::vector<Group> groups;
  return groups;
}

// ops/ before the other folders, then by name: the declared order of registry.hpp.
bool group_before(const Group& a, const Group& b) {
  const bool a_ops = a.name.rfind("ops_", 0) == 0, b_ops = b.name.rfind("ops_", 0) == 0;
  return a_ops != b_ops ? a_ops : a.name < b.name;
}

void check_new_entry(const GradcheckEntry& entry, std::set<std::string>& names, const char* who) {
  if (entry.name.empty()) throw std::invalid_argument(std::string(who) + ": a gradcheck entry needs a name");
  if (!entry.op)
    throw std::invalid_argument(std::string(who) + ": the gradcheck entry \"" + entry.name + "\" has no op");
  if (!entry.sample_inputs)
    throw std::invalid_argument(std::string(who) + ": the gradcheck entry \"" + entry.name + "\" has no sample inputs");
  if (!names.insert(entry.name).second)
    throw std::invalid_argument(std::string(who) + ": two gradcheck entries are named \"" + entry.name + "\"" +
                                (entry.group.empty() ? "" : " (the second in " + entry.group + ")"));
}

struct Registry {
  std::mutex mutex;
  std::vector<GradcheckEntry> entries;
  std::set<std::string> names;

  Registry() {
    std::vector<Group> groups = registered_groups();
    std::sort(groups.begin(), groups.end(), group_before);
    for (std::size_t i = 0; i < groups.size(); ++i) {
      if (i > 0 && groups[i].name == groups[i - 1].name)
        throw std::logic_error("gradcheck registry: two files register the group " + groups[i].name);
      std::vector<GradcheckEntry> group = groups[i].entries();
      if (group.empty())
        throw std::logic_error("gradcheck registry: the file " + groups[i].name + " registers no checks");
      for (auto& entry : group) {
        entry.group = groups[i].name;
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

// The sample's inputs (named for a module's report) and the module's parameters.
NamedTensors module_tensors(const SampleInput& sample) {
  NamedTensors tensors;
  const std::size_t n = sample.inputs.size();
  for (std::size_t i = 0; i < n; ++i)
    tensors.emplace_back(
        i < sample.input_names.size() ? sample.input_names[i] : "input" + (n > 1 ? std::to_string(i) : std::string()),
        sample.inputs[i]);
  for (const auto& p : sample.module->named_parameters()) tensors.emplace_back(p.first, p.second);
  return tensors;
}

// "(2, 3, 4) (3, 1) mask", and for a module " + 2 params (25 values)".
std::string describe(const SampleInput& sample) {
  std::string s = gradcheck_support::shapes_of(sample.inputs);
  if (!sample.note.empty()) s += (s.empty() ? "" : " ") + sample.note;
  if (!sample.module) return s;
  std::size_t count = 0, values = 0;
  for (const auto& p : sample.module->named_parameters()) {
    ++count;
    values += p.second.numel();
  }
  if (count == 0) return s;
  return s + " + " + std::to_string(count) + " params (" + std::to_string(values) + " values)";
}

using OpCheck = GradcheckResult (*)(const GradcheckFunction&, const std::vector<Tensor<double>>&,
                                    const GradcheckOptions&);
using ModuleCheck = GradcheckResult (*)(const std::function<Tensor<double>()>&, const NamedTensors&,
                                        const GradcheckOptions&);

// An op over its sample's inputs; a module over its inputs and parameters, in place.
GradcheckOutcome run_check(const GradcheckEntry& entry, const GradcheckSizes& sizes, const GradcheckOptions& options,
                           OpCheck op_check, ModuleCheck module_check) {
  SampleInput sample = entry.sample_inputs(sizes);
  sample.sizes = sizes;
  if (!sample.module)
    return {describe(sample), op_check([&](const std::vector<Tensor<double>>& in) { return entry.op(in, sample); },
                                       sample.inputs, options)};
  return {describe(sample),
          module_check([&] { return entry.op(sample.inputs, sample); }, module_tensors(sample), options)};
}

}  // namespace

GradcheckOutcome run_gradcheck(const GradcheckEntry& entry, const GradcheckSizes& sizes,
                               const GradcheckOptions& options) {
  return run_check(entry, sizes, options, &gradcheck, &gradcheck_parameters);
}

GradcheckOutcome run_gradgradcheck(const GradcheckEntry& entry, const GradcheckSizes& sizes,
                                   const GradcheckOptions& options) {
  if (!entry.supports_gradgrad)
    throw std::invalid_argument("run_gradgradcheck: the gradcheck entry \"" + entry.name +
                                "\" does not support second derivatives (supports_gradgrad is false)");
  return run_check(entry, sizes, options, &gradgradcheck, &gradgradcheck_parameters);
}

namespace detail {
GradcheckRegistration::GradcheckRegistration(const char* group, std::vector<GradcheckEntry> (*entries)()) {
  registered_groups().push_back({group, entries});
}
}  // namespace detail

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
