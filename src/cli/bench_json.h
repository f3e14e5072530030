#pragma once
// What the JSON benchmarks (`loom bench ckpt|live|opd`) share: run the
// driver on `threads` intra-op threads (0: LibTorch's) and print its result
// as one JSON line, or its error as "bench NAME: ..." (exit 2 for bad
// arguments, 1 otherwise).

#include <ATen/Parallel.h>

#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cli/command.h"
#include "cli/threads.h"

namespace loom::cli {

template <class Run>
int RunJsonBench(const std::string& name, int threads, Run run) {
  if (threads > 0) SetComputeThreads(threads);
  const absl::StatusOr<nlohmann::json> result = run();
  if (!result.ok()) {
    std::cerr << "bench " << name << ": " << result.status().message() << "\n";
    return StatusExitCode(result.status());
  }
  std::cout << result->dump() << "\n";
  return kExitOk;
}

}  // namespace loom::cli
