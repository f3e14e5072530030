#pragma once
// What the trainer builds from its `sandbox:` config section: the local
// workers it owns (when `local: N`) and the pool that places episodes on
// the workers. Destroying it stops the local workers.

#include <memory>

#include "absl/status/statusor.h"
#include "loom/config/sandbox_section.h"
#include "loom/rpc/local_workers.h"
#include "loom/rpc/worker_pool.h"

namespace loom::rpc {

struct SandboxClients {
  std::unique_ptr<LocalWorkers> local;  // null unless `local` > 0
  std::unique_ptr<WorkerPool> pool;
};

// Reads the token / CA files, starts local workers (this executable's
// `worker` subcommand, or `loom_binary` when given) and builds the pool.
// FAILED_PRECONDITION when neither workers nor local workers are configured.
absl::StatusOr<SandboxClients> StartSandboxClients(const config::SandboxSection& section,
                                                   const std::string& loom_binary = "");

// The scaffold limits of the section (max_steps, max_time_s, tool_timeout_s).
v1::ScaffoldOptions ScaffoldOptionsFrom(const config::SandboxSection& section);

}  // namespace loom::rpc
