#pragma once
// The health probe: whether an agent has broken its own environment (the
// repercussion signal of v1::Trajectory.repercussion). The scaffold runs it
// after a tool call that a cap or the timeout ended, and before verifying.

#include <string>

#include "absl/status/statusor.h"
#include "loom/sandbox/sandbox.h"

namespace loom::sandbox {

// What the agent broke ("" = nothing found), checked by the worker on the
// directories it made, opening nothing the agent named and running no
// command of the agent's:
//   - /workspace or /tmp it can no longer enter or write (its own chmod);
//   - on the session's own tmpfs, no room left in them for one page (a disk
//     it filled: the kernel refuses the write); under the watch, its files
//     over the disk caps;
//   - the environment's own `health_command` exiting non-zero, killed at a
//     cap or not done within `timeout_s` (the only probe that runs a command).
// Nothing when the worker probes no episode (SandboxConfig::health_probe).
// An error when the probe could not run for the worker's own reasons (no
// process could be started): no finding, the episode goes on.
absl::StatusOr<std::string> ProbeHealth(const Sandbox& sandbox, double timeout_s);

}  // namespace loom::sandbox
