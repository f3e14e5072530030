#include "loom/config/check.h"

#include <cstdio>
#include <cstdlib>

namespace loom::internal {

void CheckFailed(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "loom: internal error at %s:%d: check failed: %s %s\n", file, line, condition,
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace loom::internal
