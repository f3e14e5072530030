#pragma once
// Task generation's randomness: loom's one seeded source (loom/base/random.h)
// and a hash of text.

#include <cstdint>
#include <string>

#include "loom/base/random.h"

namespace loom::tasks {

// FNV-1a of `text`.
inline uint64_t HashText(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace loom::tasks
