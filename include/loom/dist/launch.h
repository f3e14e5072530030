#pragma once
// LaunchLocal: `loom launch --nproc N -- train ...` — N ranks of a command on
// this machine, as torchrun would start them: each child gets RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and
// MASTER_PORT (a free port unless one is given), and runs the same binary.
//
// The launcher forwards SIGTERM, SIGINT and SIGUSR1 to every rank (so a
// scheduler's preemption reaches all of them). When a rank fails (non-zero
// exit or killed by a signal) the others are given `grace_s` to notice
// (their collectives fail when the peer's connection closes) and are then
// killed. The exit status is 0 when every rank exited 0, otherwise the first
// failing rank's (128 + signal for a signal). Call from the main thread.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::dist {

struct LaunchOptions {
  int nproc = 2;
  int master_port = 0;            // 0: pick a free one
  double grace_s = 30;            // how long the others may take to exit after a rank failed
  std::string binary;             // the program every rank runs (the loom binary)
  std::vector<std::string> args;  // its arguments (argv[1..])
  std::string log;                // "": the ranks share the launcher's stdout and stderr;
                                  // else both are appended to this file
};

// The exit status, or INVALID_ARGUMENT / UNAVAILABLE when the ranks could not
// be started.
absl::StatusOr<int> LaunchLocal(const LaunchOptions& options);

// A TCP port on 127.0.0.1 that was free a moment ago.
absl::StatusOr<int> FreeLoopbackPort();

}  // namespace loom::dist
