#pragma once
// ParallelFor: a fixed number of threads that each take the next index until
// none is left — for independent jobs of uneven length (sandbox episodes,
// task checks), where a static split would wait on its slowest share.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace loom {

// Calls fn(i) once for every i in [0, n), on min(threads, n) threads (at
// least one), and returns when all calls have. `fn` must be safe to call
// from several threads at once.
template <class Fn>
void ParallelFor(size_t n, size_t threads, Fn fn) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  const size_t count = std::max<size_t>(1, std::min(threads, n));
  for (size_t t = 0; t < count; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) fn(i);
    });
  }
  for (std::thread& thread : pool) thread.join();
}

}  // namespace loom
