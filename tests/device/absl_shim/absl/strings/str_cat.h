#pragma once
// Minimal absl::StrCat / StrAppend for tests/device (see status/status.h).

#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

namespace absl {
namespace shim_internal {

template <typename T>
void Append(std::string& out, const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out += std::string_view(value);
  } else if constexpr (std::is_integral_v<T>) {
    out += std::to_string(value);
  } else {
    std::ostringstream s;
    s.precision(6);
    s << value;
    out += s.str();
  }
}

}  // namespace shim_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (shim_internal::Append(out, args), ...);
  return out;
}

template <typename... Args>
void StrAppend(std::string* dest, const Args&... args) {
  (shim_internal::Append(*dest, args), ...);
}

}  // namespace absl
