#pragma once
// Debian's Abseil has its own absl::string_view (not std::string_view), so
// heterogeneous lookups in absl hash maps take this conversion.

#include <string_view>

#include "absl/strings/string_view.h"

namespace loom::tokenizer {

inline absl::string_view AsAbsl(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace loom::tokenizer
