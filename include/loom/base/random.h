#pragma once
// Portable deterministic randomness, the one source every seeded draw in loom
// comes from (task generation, sampling, dispatch, benches): the same seed
// gives the same numbers with any standard library and CPU, which std
// distributions do not promise. Seeding and so reproducibility depend on it.

#include <cstdint>

namespace loom {

// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from the top 53 bits of `bits`.
inline double UnitInterval(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

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
  double UniformReal() { return UnitInterval(Next()); }

 private:
  uint64_t state_;
};

}  // namespace loom
