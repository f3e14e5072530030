#include "loom/sandbox/usage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loom/sandbox/tree.h"
#include "sandbox/unique_fd.h"

namespace loom::sandbox {
namespace {

std::string MiB(int64_t bytes) { return absl::StrCat(bytes >> 20, " MiB"); }

// One reading of /proc: who is whose child, and resident pages.
struct ProcessTable {
  std::chrono::steady_clock::time_point taken;
  std::unordered_map<int, std::vector<int>> children;
  std::unordered_map<int, int64_t> rss_pages;
};

std::shared_ptr<const ProcessTable> ScanProcesses() {
  auto table = std::make_shared<ProcessTable>();
  table->taken = std::chrono::steady_clock::now();
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return table;
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    const std::optional<ProcStat> stat = ReadProcStat(pid);
    if (!stat) continue;
    table->children[stat->ppid].push_back(pid);
    table->rss_pages[pid] = stat->rss_pages;
  }
  closedir(proc);
  return table;
}

// A table no older than `max_age`. Concurrent watches share one scan: with
// many commands running, each scanning /proc on its own would cost far more
// than the commands.
std::shared_ptr<const ProcessTable> RecentProcesses(std::chrono::milliseconds max_age) {
  static std::mutex mu;
  static std::shared_ptr<const ProcessTable> latest;
  std::lock_guard<std::mutex> lock(mu);
  if (latest == nullptr || std::chrono::steady_clock::now() - latest->taken > max_age) {
    latest = ScanProcesses();
  }
  return latest;
}

// One walk of MeasureDisk: a descriptor per level, so its depth is bounded.
class DiskWalk {
 public:
  explicit DiskWalk(const DiskWalkLimits& limits) : limits_(limits) {}

  void Count(const struct stat& st) {
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1 && !linked_.insert({st.st_dev, st.st_ino}).second) {
      return;
    }
    usage.bytes += static_cast<int64_t>(st.st_blocks) * 512;
    usage.inodes += 1;
    if (usage.bytes > limits_.stop_bytes || usage.inodes > limits_.stop_inodes ||
        (usage.inodes % 256 == 0 && std::chrono::steady_clock::now() > limits_.deadline)) {
      usage.complete = false;
    }
  }

  // Counts what directory `fd` (at `rel`, `depth` below the root) holds.
  void Directory(int fd, const std::string& rel, int depth) {
    // Visited while listing, so a walk at its caps or deadline reads no further.
    const absl::Status listed = ForEachName(fd, [&](const std::string& name) {
      if (!usage.complete || !usage.unreadable.empty()) return false;
      struct stat st;
      if (fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return true;  // gone
      Count(st);
      if (!S_ISDIR(st.st_mode)) return true;
      const std::string child = absl::StrCat(rel, "/", name);
      if (depth + 1 > limits_.max_depth) {
        Unreadable(absl::StrCat(child, " (nested deeper than ", limits_.max_depth, ")"));
        return false;
      }
      UniqueFd sub(openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.ok()) {
        Directory(sub.get(), child, depth + 1);
      } else if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP) {
        Unreadable(child);  // ENOENT, ENOTDIR, ELOOP: gone or replaced since the listing
      }
      return true;
    });
    if (!listed.ok()) Unreadable(rel);
  }

  DiskUsage usage;

 private:
  void Unreadable(const std::string& what) {
    if (usage.unreadable.empty()) usage.unreadable = what.empty() ? "/" : what;
  }

  const DiskWalkLimits& limits_;
  std::set<std::pair<dev_t, ino_t>> linked_;  // files with several names, counted once
};

}  // namespace

std::optional<ProcStat> ReadProcStat(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // The command name may hold spaces and parentheses: fields follow the last ')'.
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(line).substr(paren + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state): ppid is field 4, rss field 24.
  ProcStat stat;
  if (fields.size() <= 21 || fields[0].size() != 1 || !absl::SimpleAtoi(fields[1], &stat.ppid) ||
      !absl::SimpleAtoi(fields[21], &stat.rss_pages)) {
    return std::nullopt;
  }
  stat.state = fields[0][0];
  return stat;
}

ProcessTreeUsage MeasureProcessTree(int root, std::chrono::milliseconds max_age) {
  std::shared_ptr<const ProcessTable> table =
      max_age.count() > 0 ? RecentProcesses(max_age) : ScanProcesses();
  ProcessTreeUsage usage;
  if (table->rss_pages.count(root) == 0) return usage;
  const int64_t page = sysconf(_SC_PAGESIZE);
  std::vector<int> pending = {root};
  while (!pending.empty()) {
    const int pid = pending.back();
    pending.pop_back();
    usage.processes += 1;
    usage.resident_bytes += table->rss_pages.at(pid) * page;
    auto children = table->children.find(pid);
    if (children == table->children.end()) continue;
    for (int child : children->second) {
      if (table->rss_pages.count(child) != 0) pending.push_back(child);
    }
  }
  return usage;
}

DiskUsage MeasureDisk(const std::string& dir, const DiskWalkLimits& limits) {
  DiskWalk walk(limits);
  UniqueFd root(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!root.ok() || fstat(root.get(), &st) != 0) return walk.usage;
  walk.Count(st);
  walk.Directory(root.get(), "", 0);
  return walk.usage;
}

std::string UsageWatch::Check(int pid) {
  if (memory_) {
    const ProcessTreeUsage processes = MeasureProcessTree(pid, std::chrono::milliseconds(20));
    if (processes.resident_bytes > caps_.memory_bytes) {
      return absl::StrCat("the sandbox's processes hold ", MiB(processes.resident_bytes),
                          ", over its memory cap of ", MiB(caps_.memory_bytes));
    }
  }
  const Clock::time_point now = Clock::now();
  if (!disk_ || now < next_disk_walk_) return "";
  // Past max(cap, baseline) the verdict is known: the walk stops there.
  DiskWalkLimits limits;
  limits.deadline = now + std::chrono::milliseconds(500);
  if (baseline_) {
    limits.stop_bytes = std::max(caps_.disk_bytes, baseline_->bytes);
    limits.stop_inodes = std::max(caps_.inodes, baseline_->inodes);
  }
  const DiskUsage disk = MeasureDisk(dir_, limits);
  const Clock::duration cost = Clock::now() - now;
  next_disk_walk_ = now + std::max<Clock::duration>(std::chrono::milliseconds(100), 10 * cost);
  if (!disk.unreadable.empty()) {
    return absl::StrCat("a directory the worker cannot measure: ", disk.unreadable);
  }
  if (!baseline_ && disk.complete) baseline_ = disk;
  const int64_t byte_floor = baseline_ ? baseline_->bytes : 0;
  const int64_t inode_floor = baseline_ ? baseline_->inodes : 0;
  if (disk.bytes > caps_.disk_bytes && disk.bytes > byte_floor) {
    return absl::StrCat("the sandbox's files take ", MiB(disk.bytes), ", over its disk cap of ",
                        MiB(caps_.disk_bytes));
  }
  if (disk.inodes > caps_.inodes && disk.inodes > inode_floor) {
    return absl::StrCat("the sandbox holds ", disk.inodes, " files, over its cap of ",
                        caps_.inodes);
  }
  return "";
}

}  // namespace loom::sandbox
