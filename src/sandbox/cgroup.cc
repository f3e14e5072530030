#include "sandbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace loom::sandbox {
namespace {

constexpr char kMount[] = "/sys/fs/cgroup";
constexpr const char* kControllers[] = {"memory", "pids", "cpu"};
constexpr char kWorkerPrefix[] = "loom-w";

// The worker's own group under a v1 controller ("4:memory:/a/b" in
// /proc/self/cgroup), or "" when the controller is not mounted as v1.
std::string OwnGroup(absl::string_view controller) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    for (absl::string_view name : absl::StrSplit(fields[1], ',')) {
      if (name == controller) return std::string(fields[2]);
    }
  }
  return "";
}

// Where this worker's groups of `controller` go; "" when there is nowhere.
std::string ParentDir(absl::string_view controller) {
  const std::string own = OwnGroup(controller);
  if (own.empty()) return "";
  return absl::StrCat(kMount, "/", controller, own == "/" ? "" : own);
}

// This worker's directory under each of kControllers ("" where there is
// none), read from /proc/self/cgroup once rather than at every session.
const std::vector<std::string>& WorkerDirs() {
  static const std::vector<std::string> dirs = [] {
    std::vector<std::string> found;
    for (const char* controller : kControllers) {
      const std::string parent = ParentDir(controller);
      found.push_back(parent.empty() ? "" : absl::StrCat(parent, "/", kWorkerPrefix, getpid()));
    }
    return found;
  }();
  return dirs;
}

bool WriteValue(const std::string& path, const std::string& value) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  close(fd);
  return ok;
}

// SIGKILLs every process of a group, then removes it (retrying while the
// kernel finishes them off).
void KillAndRemove(const std::string& dir) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::ifstream procs(dir + "/cgroup.procs");
    for (std::string line; std::getline(procs, line);) {
      int pid = 0;
      if (absl::SimpleAtoi(line, &pid) && pid > 0) kill(pid, SIGKILL);
    }
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The subdirectories of `dir`.
std::vector<std::string> Subdirectories(const std::string& dir) {
  std::vector<std::string> names;
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return names;
  while (const dirent* entry = readdir(listing)) {
    if (entry->d_type == DT_DIR && entry->d_name[0] != '.') names.emplace_back(entry->d_name);
  }
  closedir(listing);
  return names;
}

}  // namespace

absl::Status Cgroup::Available() {
  if (geteuid() != 0) return absl::UnavailableError("the worker is not root");
  static const absl::Status available = [] {
    for (size_t i = 0; i < WorkerDirs().size(); ++i) {
      const std::string& dir = WorkerDirs()[i];
      if (dir.empty()) {
        return absl::UnavailableError(
            absl::StrCat("no cgroup v1 '", kControllers[i], "' hierarchy"));
      }
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::UnavailableError(
            absl::StrCat("cannot make ", dir, ": ", std::strerror(errno)));
      }
    }
    return absl::OkStatus();
  }();
  return available;
}

absl::StatusOr<std::unique_ptr<Cgroup>> Cgroup::Create(const std::string& name,
                                                       const CgroupLimits& limits) {
  if (absl::Status s = Available(); !s.ok()) return s;
  std::unique_ptr<Cgroup> group(new Cgroup());
  for (size_t i = 0; i < WorkerDirs().size(); ++i) {
    const absl::string_view controller = kControllers[i];
    const std::string dir = absl::StrCat(WorkerDirs()[i], "/", name);
    if (mkdir(dir.c_str(), 0755) != 0) {
      return absl::InternalError(absl::StrCat("cannot make ", dir, ": ", std::strerror(errno)));
    }
    group->dirs_.push_back(dir);
    bool ok = true;
    if (controller == "memory" && limits.memory_bytes > 0) {
      const std::string bytes = std::to_string(limits.memory_bytes);
      ok = WriteValue(dir + "/memory.limit_in_bytes", bytes);
      // Where swap is accounted, memory and swap together get the same cap.
      if (ok && access((dir + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0) {
        ok = WriteValue(dir + "/memory.memsw.limit_in_bytes", bytes);
      }
      // TCP socket buffers are charged only once they have a limit.
      WriteValue(dir + "/memory.kmem.tcp.limit_in_bytes", bytes);
      group->memory_dir_ = dir;
    } else if (controller == "pids" && limits.tasks > 0) {
      ok = WriteValue(dir + "/pids.max", std::to_string(limits.tasks));
    } else if (controller == "cpu" && limits.cpus > 0) {
      constexpr int64_t kPeriodUs = 100000;
      ok = WriteValue(dir + "/cpu.cfs_period_us", std::to_string(kPeriodUs)) &&
           WriteValue(dir + "/cpu.cfs_quota_us",
                      std::to_string(std::max<int64_t>(
                          1000, std::llround(limits.cpus * static_cast<double>(kPeriodUs)))));
    }
    const int fd = open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (!ok || fd < 0) {
      if (fd >= 0) close(fd);
      return absl::InternalError(
          absl::StrCat("cannot set the limits of ", dir, ": ", std::strerror(errno)));
    }
    group->join_fds_.push_back(fd);
  }
  return group;
}

Cgroup::~Cgroup() {
  for (int fd : join_fds_) close(fd);
  for (const std::string& dir : dirs_) KillAndRemove(dir);
}

int64_t Cgroup::oom_kills() const {
  std::ifstream in(memory_dir_ + "/memory.oom_control");
  for (std::string line; std::getline(in, line);) {
    absl::string_view rest = line;
    int64_t count = 0;
    if (absl::ConsumePrefix(&rest, "oom_kill ") && absl::SimpleAtoi(rest, &count)) return count;
  }
  return 0;
}

void Cgroup::CleanLeftovers() {
  for (const char* controller : kControllers) {
    const std::string parent = ParentDir(controller);
    if (parent.empty()) continue;
    for (const std::string& name : Subdirectories(parent)) {
      absl::string_view pid_text = name;
      int pid = 0;
      if (!absl::ConsumePrefix(&pid_text, kWorkerPrefix) || !absl::SimpleAtoi(pid_text, &pid)) {
        continue;
      }
      const bool alive = kill(pid, 0) == 0 || errno != ESRCH;
      if (alive) continue;
      const std::string dir = absl::StrCat(parent, "/", name);
      for (const std::string& group : Subdirectories(dir)) KillAndRemove(dir + "/" + group);
      rmdir(dir.c_str());
    }
  }
}

}  // namespace loom::sandbox
