#pragma once
// The reasoning-effort tiers: names for numeric efforts, accepted wherever an
// effort is (effort.levels, `loom generate --effort`, `loom eval --efforts`,
// `loom chat encode --reasoning-effort`). Each renders the numeric effort
// line of that value. (The DeepSeek-V4 format's own literal modes keep the
// names v4-max and v4-high in the chat encoder.)

#include <string>
#include <utility>
#include <vector>

namespace loom::config {

inline const std::vector<std::pair<std::string, int>>& EffortTiers() {
  static const std::vector<std::pair<std::string, int>> tiers = {
      {"max", 100}, {"high", 75}, {"low", 50}};
  return tiers;
}

}  // namespace loom::config
