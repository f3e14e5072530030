#include "cli/threads.h"

#include <ATen/Parallel.h>

#include <algorithm>

// OpenBLAS's setter, when the BLAS LibTorch loaded is OpenBLAS (null otherwise).
extern "C" void openblas_set_num_threads(int threads) __attribute__((weak));

namespace loom::cli {

void SetComputeThreads(int threads) {
  threads = std::max(1, threads);
  at::set_num_threads(threads);
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(threads);
}

}  // namespace loom::cli
