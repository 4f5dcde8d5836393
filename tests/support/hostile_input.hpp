// Hostile input for the loaders' tests: deep JSON, a run on the default 8 MiB stack (where a
// recursion over hostile input overflows), and the check that what escapes a loader is an error
// naming the file -- never a bare std::bad_alloc, std::length_error, nlohmann exception, or a
// std::invalid_argument / std::out_of_range of a number conversion.
#pragma once

#include <gtest/gtest.h>
#include <pthread.h>

#include <exception>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include <xgrad/base/check.hpp>

namespace xgrad::testing {

// `levels` of '[' (200 KB by default), closed or not: a recursive reader or dump() overflows.
inline std::string deep_json(std::size_t levels = 200000, bool closed = false) {
  return std::string(levels, '[') + (closed ? std::string(levels, ']') : std::string());
}

// Runs `f` on a thread with an 8 MiB stack, Linux's default (so a test fails the same under
// `ulimit -s unlimited`), and rethrows what it threw.
inline void on_default_stack(const std::function<void()>& f) {
  struct Call {
    const std::function<void()>* f;
    std::exception_ptr error;
  } call{&f, nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, std::size_t{8} << 20);
  pthread_t thread;
  const auto body = [](void* p) -> void* {
    auto* c = static_cast<Call*>(p);
    try {
      (*c->f)();
    } catch (...) {
      c->error = std::current_exception();
    }
    return nullptr;
  };
  const int created = pthread_create(&thread, &attr, body, &call);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(created, 0);
  pthread_join(thread, nullptr);
  if (call.error) std::rethrow_exception(call.error);
}

// What escaped `f` (run on the default stack): "" when nothing did; the message of an error a
// user may see (a std::runtime_error, or an OutOfMemoryError with its message); otherwise
// "FORBIDDEN <kind>: <what>".
inline std::string escape_of(const std::function<void()>& f) {
  try {
    on_default_stack(f);
  } catch (const OutOfMemoryError& e) {
    return e.what();
  } catch (const std::bad_alloc& e) {
    return std::string("FORBIDDEN a bare std::bad_alloc: ") + e.what();
  } catch (const nlohmann::json::exception& e) {
    return std::string("FORBIDDEN an nlohmann exception: ") + e.what();
  } catch (const std::length_error& e) {
    return std::string("FORBIDDEN std::length_error: ") + e.what();
  } catch (const std::invalid_argument& e) {
    return std::string("FORBIDDEN std::invalid_argument: ") + e.what();
  } catch (const std::out_of_range& e) {
    return std::string("FORBIDDEN std::out_of_range: ") + e.what();
  } catch (const std::runtime_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("FORBIDDEN another std::exception: ") + e.what();
  } catch (...) {
    return "FORBIDDEN a non-standard exception";
  }
  return "";
}

// `f` must refuse its input with an error whose message has `fragment` (the file's name, a key).
#define EXPECT_REFUSED(f, fragment)                                                                     \
  do {                                                                                                  \
    const std::string m_ = ::xgrad::testing::escape_of(f);                                              \
    EXPECT_TRUE(!m_.empty() && m_.rfind("FORBIDDEN", 0) != 0 && m_.find(fragment) != std::string::npos) \
        << "expected an error naming \"" << (fragment) << "\", got: " << (m_.empty() ? "none" : m_);    \
  } while (0)

}  // namespace xgrad::testing
