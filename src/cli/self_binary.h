#pragma once
// The path of the running `loom` binary, for commands that start more of it
// (`loom launch`, `loom bench dist`).

#include <unistd.h>

#include <climits>
#include <string>

namespace loom::cli {

// /proc/self/exe resolved; "" when it cannot be read.
inline std::string SelfBinary() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

}  // namespace loom::cli
