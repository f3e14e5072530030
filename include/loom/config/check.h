#pragma once
// Invariant checks. A failed LOOM_CHECK is a bug in loom, not a user mistake:
// it prints the condition, location and message and aborts. Expected failures
// (bad input, missing files) return absl::Status instead.

#include <sstream>
#include <string>

namespace loom::internal {

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              const std::string& message);

}  // namespace loom::internal

// Usage: LOOM_CHECK(n > 0, "n=" << n);
#define LOOM_CHECK(condition, ...)                                              \
  do {                                                                          \
    if (!(condition)) {                                                         \
      std::ostringstream loom_check_stream_;                                    \
      loom_check_stream_ << "" __VA_ARGS__;                                     \
      ::loom::internal::CheckFailed(__FILE__, __LINE__, #condition,             \
                                    loom_check_stream_.str());                  \
    }                                                                           \
  } while (false)
