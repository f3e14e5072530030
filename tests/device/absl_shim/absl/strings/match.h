#pragma once
// Minimal absl::StartsWith / EndsWith for tests/device (see status/status.h).

#include <string_view>

namespace absl {

inline bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

inline bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace absl
