#pragma once
// The kernel's limits for one sandbox: a cgroup v1 group per controller
// (memory, pids, cpu), made beneath the worker's own groups, which every
// command of the session joins (its bwrap, and so all it starts). Memory
// covers what the kernel charges to a group: anonymous memory, page cache,
// tmpfs, /dev/shm, memfd and SysV shared memory, kernel memory, and TCP
// socket buffers (memory.kmem.tcp); the group's own OOM killer enforces it,
// and the events it counts (memory.oom_control's oom_kill) let the worker
// end the whole command. pids caps tasks, threads included; cpu is a CFS
// quota. Made by root only: an unprivileged worker gets NotFound-style
// errors and falls back to the /proc watch (usage.h).
//
// A Cgroup is used by the thread that owns its Sandbox; oom_kills() may be
// called from any thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::sandbox {

struct CgroupLimits {
  int64_t memory_bytes = 0;  // memory.limit_in_bytes (and memsw, where swap is counted)
  int64_t tasks = 0;         // pids.max; 0: no cap
  double cpus = 0;           // CPU time per wall second (cfs quota); 0: no cap
};

class Cgroup {
 public:
  // Whether this worker can make groups, and in words how sandboxes are
  // limited here (for the start-up log and Status).
  static absl::Status Available();

  // Groups `<controller>/<worker's group>/loom-w<pid>/<name>`.
  static absl::StatusOr<std::unique_ptr<Cgroup>> Create(const std::string& name,
                                                        const CgroupLimits& limits);
  // Kills whatever is left in the groups and removes them.
  ~Cgroup();
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  // `cgroup.procs` of each group, open for writing: a child writes "0" to
  // each before exec to join (ProcessSpec::join_fds).
  const std::vector<int>& join_fds() const { return join_fds_; }

  // Processes the group's OOM killer has ended since the group was made.
  int64_t oom_kills() const;

  // Removes the groups of workers that no longer run.
  static void CleanLeftovers();

 private:
  Cgroup() = default;
  std::vector<std::string> dirs_;  // one per controller
  std::vector<int> join_fds_;
  std::string memory_dir_;
};

}  // namespace loom::sandbox
