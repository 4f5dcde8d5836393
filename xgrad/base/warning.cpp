#include <xgrad/base/warning.hpp>

#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

namespace xgrad {

namespace {

struct Warnings {
  std::mutex mutex;  // serializes the handler's calls too
  WarningHandler handler;
  std::set<std::pair<std::string, int>> warned;  // call sites (file, line)
};

Warnings& warnings() {
  static Warnings w;
  return w;
}

void print_to_stderr(const Warning& w) {
  std::fprintf(stderr, "xgrad warning: %s (%s:%d)\n", w.message.c_str(), w.file, w.line);
}

}  // namespace

WarningHandler set_warning_handler(WarningHandler handler) {
  Warnings& w = warnings();
  std::lock_guard<std::mutex> lock(w.mutex);
  std::swap(w.handler, handler);
  return handler;
}

void reset_warnings() {
  Warnings& w = warnings();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.warned.clear();
}

namespace detail {

void warn_once(const char* file, int line, const std::string& message) {
  Warnings& w = warnings();
  std::lock_guard<std::mutex> lock(w.mutex);
  const auto site = w.warned.emplace(file, line);
  if (!site.second) return;
  const Warning warning{message, file, line};
  try {
    if (w.handler)
      w.handler(warning);
    else
      print_to_stderr(warning);
  } catch (...) {
    // A handler that throws makes the warning an error: the call did not go through, so the
    // next call from the site raises again (Python's "error" filter).
    w.warned.erase(site.first);
    throw;
  }
}

}  // namespace detail
}  // namespace xgrad
