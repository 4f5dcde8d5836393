// Golden fixtures written from PyTorch by scripts/make_fixtures.py; format in
// tests/fixtures/README.md.
//
//   auto f = xgrad::testing::load_fixture("nn_linear_float64");
//   xt::xarray<double> x = f.array<double>("input");
//   auto params = f.arrays_with_prefix<double>("param.");  // {"weight": ..., "bias": ...}
//   double lr = f.config()["options"]["lr"];
//
// Errors: a missing file or a malformed entry throws std::runtime_error; asking for a tensor the
// fixture does not have, or reading a bool/int tensor as another kind, throws
// std::invalid_argument naming the fixture and the tensor.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtensor/xarray.hpp>

#include <xgrad/core/tensor.hpp>
#include <xgrad/core/factories.hpp>

#ifndef XGRAD_FIXTURES_DIR
#error "XGRAD_FIXTURES_DIR must name the tests/fixtures directory (set by tests/CMakeLists.txt)"
#endif

namespace xgrad::testing {

class Fixture {
 public:
  Fixture(std::string name, nlohmann::json document)
      : name_(std::move(name)), doc_(std::move(document)) {
    if (!doc_.is_object() || !doc_.contains("tensors") || !doc_["tensors"].is_object())
      throw std::runtime_error("fixture \"" + name_ + "\": no \"tensors\" object");
  }

  const std::string& name() const { return name_; }
  // "float64" or "float32": the precision PyTorch computed the case in.
  std::string dtype() const { return doc_.value("dtype", std::string()); }
  std::string torch_version() const { return doc_.value("torch_version", std::string()); }
  // The case's options with PyTorch's argument names; null when the file has none.
  const nlohmann::json& config() const {
    static const nlohmann::json null_json;
    auto it = doc_.find("config");
    return it == doc_.end() ? null_json : *it;
  }

  bool has(const std::string& key) const { return tensors().contains(key); }
  // Every tensor name, sorted.
  std::vector<std::string> names() const { return names_with_prefix(""); }
  // The names starting with prefix (full names, sorted).
  std::vector<std::string> names_with_prefix(const std::string& prefix) const {
    std::vector<std::string> out;
    for (auto it = tensors().begin(); it != tensors().end(); ++it)
      if (it.key().compare(0, prefix.size(), prefix) == 0) out.push_back(it.key());
    return out;
  }

  std::vector<std::size_t> shape(const std::string& key) const {
    return entry(key).at("shape").get<std::vector<std::size_t>>();
  }
  // "float", "bool" or "int64".
  std::string kind(const std::string& key) const {
    return entry(key).value("dtype", std::string("float"));
  }

  // A floating tensor as T (float32 cases hold exact float32 values, so T = float is exact).
  template <class T>
  xt::xarray<T> array(const std::string& key) const {
    expect_kind(key, "float", "array<T>");
    return read<T>(key, [&](const nlohmann::json& v) { return static_cast<T>(to_double(key, v)); });
  }
  // The same values as a leaf Tensor (e.g. an input whose gradient is compared).
  template <class T>
  Tensor<T> tensor(const std::string& key, bool requires_grad = false) const {
    return Tensor<T>(array<T>(key), requires_grad);
  }
  // A tensor of one element (a loss, a total norm), whatever its shape.
  template <class T>
  T scalar(const std::string& key) const {
    xt::xarray<T> a = array<T>(key);
    if (a.size() != 1)
      throw std::invalid_argument(where(key) + " has " + std::to_string(a.size()) +
                                  " elements, expected 1 for scalar()");
    return *a.begin();
  }
  xt::xarray<bool> bool_array(const std::string& key) const {
    expect_kind(key, "bool", "bool_array");
    return read<bool>(key, [&](const nlohmann::json& v) {
      if (!v.is_number_integer() || (v.get<std::int64_t>() != 0 && v.get<std::int64_t>() != 1))
        throw std::runtime_error(where(key) + ": bool data must be 0 or 1, got " + v.dump());
      return v.get<std::int64_t>() == 1;
    });
  }
  xt::xarray<std::int64_t> index_array(const std::string& key) const {
    expect_kind(key, "int64", "index_array");
    return read<std::int64_t>(key, [&](const nlohmann::json& v) {
      if (!v.is_number_integer())
        throw std::runtime_error(where(key) + ": int64 data must be integers, got " + v.dump());
      return v.get<std::int64_t>();
    });
  }
  // Every floating tensor whose name starts with prefix, keyed by the rest of the name:
  // arrays_with_prefix<double>("param.") gives state_dict keys -> values.
  template <class T>
  std::map<std::string, xt::xarray<T>> arrays_with_prefix(const std::string& prefix) const {
    std::map<std::string, xt::xarray<T>> out;
    for (const std::string& n : names_with_prefix(prefix))
      out.emplace(n.substr(prefix.size()), array<T>(n));
    return out;
  }

 private:
  const nlohmann::json& tensors() const { return doc_.at("tensors"); }

  std::string where(const std::string& key) const {
    return "fixture \"" + name_ + "\", tensor \"" + key + "\"";
  }

  const nlohmann::json& entry(const std::string& key) const {
    auto it = tensors().find(key);
    if (it == tensors().end()) {
      std::ostringstream msg;
      msg << "fixture \"" << name_ << "\" has no tensor \"" << key << "\"; it has:";
      for (const std::string& n : names()) msg << ' ' << n;
      throw std::invalid_argument(msg.str());
    }
    if (!it->is_object() || !it->contains("shape") || !it->contains("data") || !(*it)["data"].is_array())
      throw std::runtime_error(where(key) + ": expected {\"shape\": [...], \"data\": [...]}");
    return *it;
  }

  void expect_kind(const std::string& key, const std::string& wanted, const char* reader) const {
    std::string k = kind(key);
    if (k != wanted)
      throw std::invalid_argument(where(key) + " is " + k + ", not " + wanted + ": read it with " +
                                  (k == "bool" ? "bool_array" : k == "int64" ? "index_array" : "array<T>") +
                                  ", not " + reader);
  }

  // Numbers, or "inf" / "-inf" / "nan" (JSON has no non-finite numbers).
  double to_double(const std::string& key, const nlohmann::json& v) const {
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    }
    throw std::runtime_error(where(key) + ": expected a number or \"inf\", \"-inf\", \"nan\", got " +
                             v.dump());
  }

  template <class T, class Convert>
  xt::xarray<T> read(const std::string& key, Convert convert) const {
    const nlohmann::json& e = entry(key);
    std::vector<std::size_t> s = shape(key);
    std::size_t n = 1;
    for (std::size_t d : s) n *= d;
    const nlohmann::json& data = e["data"];
    if (data.size() != n)
      throw std::runtime_error(where(key) + ": " + std::to_string(data.size()) +
                               " values for a shape of " + std::to_string(n) + " elements");
    xt::xarray<T> out = xt::xarray<T>::from_shape(s);
    T* p = out.data();
    for (std::size_t i = 0; i < n; ++i) p[i] = convert(data[i]);
    return out;
  }

  std::string name_;
  nlohmann::json doc_;
};

// Reads XGRAD_FIXTURES_DIR/<case_name>.json.
inline Fixture load_fixture(const std::string& case_name) {
  const std::string path = std::string(XGRAD_FIXTURES_DIR) + "/" + case_name + ".json";
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("fixture \"" + case_name + "\": cannot open " + path +
                             " (regenerate with /usr/bin/python3 scripts/make_fixtures.py)");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("fixture \"" + case_name + "\": " + path + " is not valid JSON: " + e.what());
  }
  return Fixture(case_name, std::move(doc));
}

}  // namespace xgrad::testing
