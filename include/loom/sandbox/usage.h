#pragma once
// What a sandbox uses, measured from the worker's side where the command
// cannot tamper with the measurement, and the watch that kills a command
// whose sandbox goes over its caps. Per-process rlimits alone do not bound a
// sandbox: eight processes under a 2 GiB address-space limit hold 16 GiB.
//
// Memory is the resident set of the command's whole process tree (bwrap,
// its pid-namespace init, and every descendant: an orphan is re-parented to
// that init, so nothing leaves the tree); disk is the allocated size and the
// number of entries of the session directory (workspace, /tmp and /dev/shm).
// Processes are capped by the kernel instead (RLIMIT_NPROC inside the
// sandbox's own user namespace, see sandbox.h).

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace loom::sandbox {

struct SandboxCaps {
  int64_t memory_bytes = 2LL << 30;  // resident, the whole process tree
  int64_t disk_bytes = 2LL << 30;    // allocated, the whole session directory
  int64_t inodes = 100000;           // files, directories and links in it
  double cpus = 1.0;                 // CPU seconds per wall second (kernel limits only); 0: any
};

struct ProcessTreeUsage {
  int processes = 0;
  int64_t resident_bytes = 0;
};

// What /proc/<pid>/stat says of a process; nullopt when it is gone.
struct ProcStat {
  char state = '?';  // R, S, D, Z, ...
  int ppid = 0;
  int64_t rss_pages = 0;
};
std::optional<ProcStat> ReadProcStat(int pid);

// `root` and all its descendants, from /proc/<pid>/stat: a scan of its own,
// or one at most `max_age` old that any thread made.
ProcessTreeUsage MeasureProcessTree(
    int root, std::chrono::milliseconds max_age = std::chrono::milliseconds(0));

struct DiskUsage {
  int64_t bytes = 0;   // st_blocks * 512, so sparse files count what they hold
  int64_t inodes = 0;  // entries, `dir` itself included; hard links once each
  // What the walk could not measure (a directory it may not enter, or one
  // nested deeper than it goes): the watch treats it as a breach.
  std::string unreadable;
  // False when the walk stopped early: past a stop_* figure, or its deadline.
  bool complete = true;
};

struct DiskWalkLimits {
  // The walk stops once past either: a cap is breached whatever the rest holds.
  int64_t stop_bytes = std::numeric_limits<int64_t>::max();
  int64_t stop_inodes = std::numeric_limits<int64_t>::max();
  int max_depth = 64;  // directories below `dir`; deeper is unreadable
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// Walks `dir` by descriptors (openat with O_NOFOLLOW at every step, so a
// link or a rename race can never lead the walk outside `dir`). It changes
// nothing: a directory the worker may not read is reported, never chmod-ed.
DiskUsage MeasureDisk(const std::string& dir, const DiskWalkLimits& limits = {});

// Checks one running command against its sandbox's caps: memory at every
// call, the disk walk when due (at most every 100 ms, and at least ten
// times its own cost apart so that a large workspace is not walked
// continuously). A walk stops at its caps and after 500 ms, so the
// command's own timeout is never held up for long. A disk cap is breached only while usage grows
// past it, so a command that deletes files can run in a sandbox left over its cap.
class UsageWatch {
 public:
  // `memory` and `disk`: which caps this watch checks (the kernel may
  // enforce the others).
  UsageWatch(const SandboxCaps& caps, std::string dir, bool memory = true, bool disk = true)
      : caps_(caps), dir_(std::move(dir)), memory_(memory), disk_(disk) {}
  // "" or what was breached, in words, for ProcessSpec::watch.
  std::string Check(int pid);

 private:
  using Clock = std::chrono::steady_clock;
  const SandboxCaps& caps_;
  std::string dir_;
  bool memory_, disk_;
  std::optional<DiskUsage> baseline_;  // the first walk
  Clock::time_point next_disk_walk_{};
};

}  // namespace loom::sandbox
