#pragma once
// A CPU allocator for LibTorch that keeps large freed blocks for reuse.
//
// LibTorch's default CPU allocator hands every tensor to malloc, and glibc
// serves large blocks with fresh mmap()s that it unmaps again on free (or
// trims off its heap). A training step whose attention scores are tens of
// MiB then page-faults its whole working set in again in every micro-batch:
// on a 2-core VM a [10, 4, 600, 600] float32 scores-and-softmax took 357 ms
// and 40k page faults, against 60 ms with glibc's mmap threshold raised
// (docs/PERFORMANCE.md, "cpu cache"). This allocator keeps freed blocks of
// at least 1 MiB, up to a cap of idle bytes (the least recently freed go
// first), and hands one out again to a request it fits within an eighth.
// Smaller blocks go to malloc as before.
//
// Once installed it serves every CPU tensor of the process, on any thread.
// Thread-safe. Contents of a reused block are whatever was there, as with
// malloc: at::empty promises nothing more.

#include <cstdint>

namespace loom::model {

struct CpuCacheStats {
  int64_t hits = 0;          // large requests served from the cache
  int64_t misses = 0;        // large requests that took fresh memory
  int64_t evictions = 0;     // idle blocks given back to the system
  int64_t idle_bytes = 0;    // held for reuse now
  int64_t in_use_bytes = 0;  // large blocks handed out and not yet freed
};

// Makes LibTorch allocate CPU tensors through the caching allocator (the
// first call installs it; tensors allocated before keep their own deleter)
// and sets how many idle bytes it may keep. 0 keeps none: every large block
// goes back to the system when freed, as without it.
void UseCachingCpuAllocator(int64_t idle_cap_bytes);

// Counters since the process started; all zero when it was never installed.
CpuCacheStats CachingCpuAllocatorStats();

}  // namespace loom::model
