// FormatError: a file xgrad reads is malformed -- truncated, corrupt, forged or of another
// format. The message names the file and what is wrong with it. It derives from
// std::runtime_error, like the errors of the file system (a missing or unreadable file), so one
// `catch (const std::runtime_error&)` handles every failed load.
#pragma once

#include <stdexcept>

namespace xgrad {

class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace xgrad
