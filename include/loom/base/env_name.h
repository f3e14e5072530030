#pragma once
// What may name an environment variable loom passes on: letters, digits and
// `_`, not starting with a digit (the POSIX portable names, any case). The
// worker refuses a harness run's other names; the config refuses them at load.

#include <string_view>

#include "absl/strings/ascii.h"

namespace loom {

inline bool IsEnvName(std::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace loom
