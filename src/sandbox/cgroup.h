#pragma once
// The kernel's limits for one sandbox: a cgroup per sandbox, made beneath
// the worker's own group, which every command of the session joins (its
// bwrap, and so all it starts). Where cgroup v2 is delegated to the worker
// (its group offers the memory and pids controllers), one v2 group with
// memory.max, pids.max and cpu.max; elsewhere, where v1 is mounted, one v1
// group per controller (memory, pids, cpu). Memory covers what the kernel
// charges to a group: anonymous memory, page cache, tmpfs, /dev/shm, memfd
// and SysV shared memory, kernel memory, and socket buffers (v2 always; v1
// once memory.kmem.tcp has a limit); the group's own OOM killer enforces it,
// and the events it counts (oom_kill in memory.events, or v1's
// memory.oom_control) let the worker end the whole command. pids caps
// tasks, threads included; cpu is a CFS quota. Made by root only: an
// unprivileged worker gets an error and falls back to the /proc watch
// (usage.h).
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
  int64_t memory_bytes = 0;  // memory.max (v1: limit_in_bytes, and memsw where swap counts)
  int64_t tasks = 0;         // pids.max; 0: no cap
  double cpus = 0;           // CPU time per wall second (cfs quota); 0: no cap
};

// Where this worker's groups go: `<parent>/loom-w<pid>`, one directory per
// controller under v1, one for them all under v2.
struct CgroupLayout {
  int version = 0;
  std::vector<std::string> dirs;         // the worker's directories
  std::vector<std::string> controllers;  // v1: the one of each dir; v2: those enabled

  // The v1 hierarchies of memory, pids and cpu, where all three are mounted.
  static absl::StatusOr<CgroupLayout> V1();
  // The v2 hierarchy, beneath the worker's own group, with `controllers`
  // enabled for the sandboxes' groups. An error names what is missing: no
  // cgroup2 mount, a controller the group does not offer, or one it cannot
  // enable (a delegated group must hold no process of its own).
  static absl::StatusOr<CgroupLayout> V2(const std::vector<std::string>& controllers);
  // "v2 memory, pids, cpu".
  std::string Describe() const;
};

class Cgroup {
 public:
  // The layout this worker uses (v2 where delegated, else v1), found once,
  // or why there is none (the start-up log and Status say it).
  static absl::StatusOr<CgroupLayout> Layout();
  static absl::Status Available() { return Layout().status(); }

  // The group `<worker dir>/<name>` (each controller's, under v1), limited.
  static absl::StatusOr<std::unique_ptr<Cgroup>> Create(const std::string& name,
                                                        const CgroupLimits& limits);
  static absl::StatusOr<std::unique_ptr<Cgroup>> CreateIn(const CgroupLayout& layout,
                                                          const std::string& name,
                                                          const CgroupLimits& limits);
  // Kills whatever is left in the groups and removes them.
  ~Cgroup();
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  // `cgroup.procs` of each group, open for writing: a child writes "0" to
  // each before exec to join (ProcessSpec::join_fds).
  const std::vector<int>& join_fds() const { return join_fds_; }
  const std::vector<std::string>& dirs() const { return dirs_; }

  // Processes the group's OOM killer has ended since the group was made.
  int64_t oom_kills() const;

  // Removes the groups of workers that no longer run.
  static void CleanLeftovers();

 private:
  Cgroup() = default;
  int version_ = 0;
  std::vector<std::string> dirs_;  // v1: one per controller
  std::vector<int> join_fds_;
  std::string memory_dir_;
};

}  // namespace loom::sandbox
