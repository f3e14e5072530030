#pragma once
// Minimal absl::StrJoin for tests/device (see status/status.h).

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace absl {

template <typename Range>
std::string StrJoin(const Range& range, std::string_view separator) {
  std::string out;
  bool first = true;
  for (const auto& item : range) {
    if (!first) out += separator;
    shim_internal::Append(out, item);
    first = false;
  }
  return out;
}

}  // namespace absl
