#pragma once
// RunProcess: runs one program as a child in its own process group with
// resource limits, feeds it stdin, captures stdout/stderr up to a cap, and
// kills the whole group (SIGKILL) when the wall-clock timeout passes.
//
// Safe to call from many threads at once: the child only makes
// async-signal-safe calls between fork and exec. The calling thread blocks
// until the child and everything in its process group have closed their
// output (or a short grace period after the kill).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::sandbox {

// setrlimit values applied in the child before exec; 0 leaves a limit as is.
// RLIMIT_CORE is always 0: no core dumps.
struct ResourceLimits {
  int64_t cpu_seconds = 0;    // RLIMIT_CPU
  int64_t address_space = 0;  // RLIMIT_AS, bytes
  int64_t file_size = 0;      // RLIMIT_FSIZE, bytes
  int64_t processes = 0;      // RLIMIT_NPROC, per uid
  int64_t open_files = 0;     // RLIMIT_NOFILE
};

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is an absolute path
  std::vector<std::string> env;   // the child's whole environment, "K=V"
  std::string stdin_text;         // written to the child's stdin, then closed
  ResourceLimits limits;
  int uid = -1;  // switch to this uid/gid before exec (-1: keep)
  int gid = -1;
  double timeout_s = 30;          // wall clock; the process group is killed after it
  size_t output_cap = 64 * 1024;  // bytes kept per stream
  std::vector<int> pass_fds;      // passed to the child as its descriptors 3, 4, ... (at most 8)
  // cgroup.procs files (open for writing) the child joins before exec.
  std::vector<int> join_fds;
  // Called about every `watch_interval_ms` while the child runs, with its
  // pid; a non-empty answer names a breached limit: the process group is
  // killed and the answer becomes ProcessResult::limit.
  std::function<std::string(int pid)> watch;
  int watch_interval_ms = 25;
};

struct ProcessResult {
  int exit_code = -1;  // exit status, or 128 + signal when killed by one
  std::string stdout_text;
  std::string stderr_text;
  bool timed_out = false;
  bool truncated = false;  // some output was dropped (a marker line says how much)
  std::string limit;       // what `watch` killed it for ("" = not killed by it)
  int64_t duration_ms = 0;
};

// Fails only when the process could not be started (fork/pipe errors).
absl::StatusOr<ProcessResult> RunProcess(const ProcessSpec& spec);

}  // namespace loom::sandbox
