#pragma once
// Portable deterministic randomness for task generation: the same seed gives
// the same problems with any standard library (std distributions do not).

#include <cstdint>
#include <string>

namespace loom::tasks {

// SplitMix64 finaliser: a well-mixed 64-bit hash of `x`.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a of `text`.
inline uint64_t HashText(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// A small SplitMix64 stream.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix64(state_++ * 0x9e3779b97f4a7c15ULL + 1); }
  // Uniform in [lo, hi] (inclusive); the modulo bias is below 2^-40 here.
  int64_t Uniform(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(Next() % span);
  }
  // Uniform in [0, 1), from the top 53 bits.
  double UniformReal() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace loom::tasks
