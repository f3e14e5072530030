#include "sandbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace loom::sandbox {
namespace {

constexpr char kMount[] = "/sys/fs/cgroup";
constexpr const char* kControllers[] = {"memory", "pids", "cpu"};
constexpr char kWorkerPrefix[] = "loom-w";
constexpr int64_t kCpuPeriodUs = 100000;

// The worker's own group under a hierarchy: a v1 controller's ("4:memory:/a/b"
// in /proc/self/cgroup) or v2's ("0::/a/b", `controller` ""); "" when there
// is none.
std::string OwnGroup(absl::string_view controller) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    if (controller.empty() && fields[0] == "0" && fields[1].empty()) return std::string(fields[2]);
    for (absl::string_view name : absl::StrSplit(fields[1], ',')) {
      if (!controller.empty() && name == controller) return std::string(fields[2]);
    }
  }
  return "";
}

// Where the cgroup2 filesystem is mounted ("" = nowhere), from mountinfo:
// "36 25 0:30 / /sys/fs/cgroup/unified rw,... - cgroup2 cgroup2 rw".
std::string V2Mount() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || !absl::StartsWith(line.substr(dash + 3), "cgroup2 ")) continue;
    std::vector<std::string> fields = absl::StrSplit(line.substr(0, dash), ' ');
    if (fields.size() >= 5) return fields[4];
  }
  return "";
}

std::string Under(const std::string& mount, const std::string& group) {
  return group == "/" ? mount : mount + group;
}

// Where this worker's groups of a v1 `controller` go; "" when there is nowhere.
std::string V1Parent(absl::string_view controller) {
  const std::string own = OwnGroup(controller);
  return own.empty() ? "" : Under(absl::StrCat(kMount, "/", controller), own);
}

// The v2 group this worker's groups go beneath; "" when there is none.
std::string V2Parent() {
  const std::string mount = V2Mount();
  const std::string own = OwnGroup("");
  return mount.empty() || own.empty() ? "" : Under(mount, own);
}

std::string WorkerDir(const std::string& parent) {
  return absl::StrCat(parent, "/", kWorkerPrefix, getpid());
}

bool WriteValue(const std::string& path, const std::string& value) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  close(fd);
  return ok;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// The names in a v2 controller list (cgroup.controllers, cgroup.subtree_control).
std::vector<std::string> ReadNames(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> names;
  for (std::string name; in >> name;) names.push_back(name);
  return names;
}

bool Has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

absl::Status Unavailable(const std::string& what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Enables `controllers` for the children of `dir`.
absl::Status EnableBelow(const std::string& dir, const std::vector<std::string>& controllers) {
  const std::vector<std::string> enabled = ReadNames(dir + "/cgroup.subtree_control");
  for (const std::string& controller : controllers) {
    if (Has(enabled, controller)) continue;
    if (!WriteValue(dir + "/cgroup.subtree_control", "+" + controller)) {
      return Unavailable(absl::StrCat("cannot enable ", controller, " in"),
                         dir +
                             "/cgroup.subtree_control (a delegated group must hold no process "
                             "of its own: run the worker in a leaf group below it)");
    }
  }
  return absl::OkStatus();
}

// SIGKILLs every process of a group, then removes it (retrying while the
// kernel finishes them off).
void KillAndRemove(const std::string& dir) {
  WriteValue(dir + "/cgroup.kill", "1");  // v2 on Linux 5.14+: all at once
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

// The limit files of one group, for the `controllers` it has (v1: its one;
// v2: those enabled; a cap whose controller is missing is not set).
bool WriteLimits(const std::string& dir, int version, const std::vector<std::string>& controllers,
                 const CgroupLimits& limits) {
  const bool v2 = version == 2;
  bool ok = true;
  if (Has(controllers, "memory") && limits.memory_bytes > 0) {
    const std::string bytes = std::to_string(limits.memory_bytes);
    if (v2) {
      ok = WriteValue(dir + "/memory.max", bytes);
      if (Exists(dir + "/memory.swap.max")) ok = ok && WriteValue(dir + "/memory.swap.max", "0");
    } else {
      ok = WriteValue(dir + "/memory.limit_in_bytes", bytes);
      // Where swap is accounted, memory and swap together get the same cap.
      if (ok && Exists(dir + "/memory.memsw.limit_in_bytes")) {
        ok = WriteValue(dir + "/memory.memsw.limit_in_bytes", bytes);
      }
      // TCP socket buffers are charged only once they have a limit.
      WriteValue(dir + "/memory.kmem.tcp.limit_in_bytes", bytes);
    }
  }
  if (Has(controllers, "pids") && limits.tasks > 0) {
    ok = ok && WriteValue(dir + "/pids.max", std::to_string(limits.tasks));
  }
  if (Has(controllers, "cpu") && limits.cpus > 0) {
    const int64_t quota =
        std::max<int64_t>(1000, std::llround(limits.cpus * static_cast<double>(kCpuPeriodUs)));
    ok = ok && (v2 ? WriteValue(dir + "/cpu.max", absl::StrCat(quota, " ", kCpuPeriodUs))
                   : WriteValue(dir + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUs)) &&
                         WriteValue(dir + "/cpu.cfs_quota_us", std::to_string(quota)));
  }
  return ok;
}

}  // namespace

absl::StatusOr<CgroupLayout> CgroupLayout::V1() {
  CgroupLayout layout;
  layout.version = 1;
  for (const char* controller : kControllers) {
    const std::string parent = V1Parent(controller);
    if (parent.empty()) {
      return absl::UnavailableError(absl::StrCat("no cgroup v1 '", controller, "' hierarchy"));
    }
    const std::string dir = WorkerDir(parent);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Unavailable("cannot make", dir);
    layout.dirs.push_back(dir);
    layout.controllers.push_back(controller);
  }
  return layout;
}

absl::StatusOr<CgroupLayout> CgroupLayout::V2(const std::vector<std::string>& controllers) {
  const std::string parent = V2Parent();
  if (parent.empty()) return absl::UnavailableError("no cgroup v2 hierarchy");
  const std::vector<std::string> offered = ReadNames(parent + "/cgroup.controllers");
  for (const std::string& controller : controllers) {
    if (!Has(offered, controller)) {
      return absl::UnavailableError(absl::StrCat(
          "cgroup v2 at ", parent, " does not offer ", controller,
          " (cgroup.controllers: ", offered.empty() ? "none" : absl::StrJoin(offered, " "), ")"));
    }
  }
  if (absl::Status s = EnableBelow(parent, controllers); !s.ok()) return s;
  const std::string dir = WorkerDir(parent);
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Unavailable("cannot make", dir);
  if (absl::Status s = EnableBelow(dir, controllers); !s.ok()) return s;
  CgroupLayout layout;
  layout.version = 2;
  layout.dirs = {dir};
  layout.controllers = controllers;
  return layout;
}

std::string CgroupLayout::Describe() const {
  return absl::StrCat("v", version, " ", absl::StrJoin(controllers, ", "));
}

absl::StatusOr<CgroupLayout> Cgroup::Layout() {
  // Asked at every call: a process that gave up root has no layout any more.
  if (geteuid() != 0) return absl::UnavailableError("the worker is not root");
  static const absl::StatusOr<CgroupLayout> layout = []() -> absl::StatusOr<CgroupLayout> {
    // v2 with memory and pids, and cpu where it is offered too.
    std::vector<std::string> wanted = {"memory", "pids"};
    const std::string parent = V2Parent();
    if (!parent.empty() && Has(ReadNames(parent + "/cgroup.controllers"), "cpu")) {
      wanted.push_back("cpu");
    }
    absl::StatusOr<CgroupLayout> v2 = CgroupLayout::V2(wanted);
    if (v2.ok()) return v2;
    absl::StatusOr<CgroupLayout> v1 = CgroupLayout::V1();
    if (v1.ok()) return v1;
    return absl::UnavailableError(absl::StrCat(v2.status().message(), "; ", v1.status().message()));
  }();
  return layout;
}

absl::StatusOr<std::unique_ptr<Cgroup>> Cgroup::Create(const std::string& name,
                                                       const CgroupLimits& limits) {
  absl::StatusOr<CgroupLayout> layout = Layout();
  if (!layout.ok()) return layout.status();
  return CreateIn(*layout, name, limits);
}

absl::StatusOr<std::unique_ptr<Cgroup>> Cgroup::CreateIn(const CgroupLayout& layout,
                                                         const std::string& name,
                                                         const CgroupLimits& limits) {
  std::unique_ptr<Cgroup> group(new Cgroup());
  group->version_ = layout.version;
  for (size_t i = 0; i < layout.dirs.size(); ++i) {
    const std::string dir = absl::StrCat(layout.dirs[i], "/", name);
    if (mkdir(dir.c_str(), 0755) != 0) {
      return absl::InternalError(absl::StrCat("cannot make ", dir, ": ", std::strerror(errno)));
    }
    group->dirs_.push_back(dir);
    // v1: the directory's one controller; v2: all of them, in one directory.
    const std::vector<std::string> controllers =
        layout.version == 1 ? std::vector<std::string>{layout.controllers[i]} : layout.controllers;
    if (Has(controllers, "memory")) group->memory_dir_ = dir;
    const int fd = open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (!WriteLimits(dir, layout.version, controllers, limits) || fd < 0) {
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
  std::ifstream in(memory_dir_ + (version_ == 2 ? "/memory.events" : "/memory.oom_control"));
  for (std::string line; std::getline(in, line);) {
    absl::string_view rest = line;
    int64_t count = 0;
    if (absl::ConsumePrefix(&rest, "oom_kill ") && absl::SimpleAtoi(rest, &count)) return count;
  }
  return 0;
}

void Cgroup::CleanLeftovers() {
  std::vector<std::string> parents = {V2Parent()};
  for (const char* controller : kControllers) parents.push_back(V1Parent(controller));
  for (const std::string& parent : parents) {
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
