#pragma once
// The CPU threads a command computes with: LibTorch's intra-op pool and
// OpenBLAS's own pool (Debian's libopenblas0-pthread runs GEMMs on a pthread
// pool that at::set_num_threads does not reach; left alone it uses every
// core, so `run.threads: 1` would still take two).

namespace loom::cli {

// Sets both pools to `threads` (at least 1).
void SetComputeThreads(int threads);

}  // namespace loom::cli
