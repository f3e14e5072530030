#include "loom/sandbox/sandbox.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "loom/config/files.h"
#include "loom/sandbox/seccomp.h"
#include "loom/sandbox/tree.h"
#include "loom/sandbox/usage.h"
#include "sandbox/cgroup.h"
#include "sandbox/netns_endpoint.h"
#include "sandbox/test_runner.h"
#include "sandbox/unique_fd.h"

namespace loom::sandbox {
namespace fs = std::filesystem;
namespace {

// Open files a harness command may hold (at least).
constexpr int64_t kHarnessOpenFiles = 4096;

// System directories shown read-only; host symlinks (merged /usr) are mirrored.
constexpr const char* kSystemDirs[] = {"/usr", "/bin", "/lib", "/lib64", "/sbin"};

// What bash, coreutils and python read under /etc; the rest of the host's
// /etc (credentials, keys, the worker's own configuration) stays unseen.
constexpr const char* kEtcEntries[] = {"alternatives", "group",     "ld.so.cache",   "ld.so.conf",
                                       "ld.so.conf.d", "localtime", "nsswitch.conf", "os-release",
                                       "passwd",       "python3",   "python3.11",    "python3.12",
                                       "python3.13"};

// Read by the command's bash before the command (BASH_ENV): the sandbox's
// process cap, set inside its user namespace. A nested bash reads it again;
// a limit the command has lowered further stays as it is.
constexpr char kRcFile[] =
    "ulimit -u {n} 2>/dev/null || { h=$(ulimit -Hu); [ \"$h\" != unlimited ] && "
    "[ \"$h\" -le {n} ]; } || exit 126\n";

// Subdirectories of a session directory: seen as /workspace, /tmp and /dev/shm.
constexpr const char* kSessionDirs[] = {"work", "tmp", "shm"};

// The seccomp program in a fresh memfd, positioned at its start.
absl::Status SeccompFd(UniqueFd* out) {
  absl::StatusOr<std::string> program = SeccompProgram();
  if (!program.ok()) return program.status();
  out->Reset(memfd_create("loom-seccomp", MFD_CLOEXEC));
  if (!out->ok() ||
      write(out->get(), program->data(), program->size()) !=
          static_cast<ssize_t>(program->size()) ||
      lseek(out->get(), 0, SEEK_SET) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot pass the seccomp filter: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::vector<std::string> BwrapArgs(const SandboxConfig& config, const std::string& dir) {
  std::vector<std::string> args = {
      config.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
      "--cap-drop", "ALL",           "--hostname",     "sandbox"};
  std::error_code ec;
  for (const char* dir : kSystemDirs) {
    if (fs::is_symlink(dir, ec)) {
      args.insert(args.end(), {"--symlink", fs::read_symlink(dir, ec).string(), dir});
    } else if (fs::is_directory(dir, ec)) {
      args.insert(args.end(), {"--ro-bind", dir, dir});
    }
  }
  args.insert(args.end(), {"--ro-bind", config.root + "/etc", "/etc"});
  if (!config.harness_dir.empty()) {
    args.insert(args.end(), {"--ro-bind", config.harness_dir, "/opt/loom/harness"});
  }
  for (const char* entry : kEtcEntries) {
    const std::string path = absl::StrCat("/etc/", entry);
    if (fs::is_directory(fs::symlink_status(path, ec))) {
      args.insert(args.end(), {"--ro-bind", path, path});
    }
  }
  // bwrap's /dev is a tmpfs the sandbox's user owns: read-only, or a
  // command could fill memory with files no cap counts. Device nodes still
  // work, and /dev/shm is the session's own directory.
  args.insert(args.end(),
              {"--proc",     "/proc",        "--dev", "/dev",         "--bind",      dir + "/shm",
               "/dev/shm",   "--remount-ro", "/dev",  "--bind",       dir + "/work", "/workspace",
               "--bind",     dir + "/tmp",   "/tmp",  "--remount-ro", "/",           "--chdir",
               "/workspace", "--seccomp",    "3"});
  return args;
}

absl::Status CheckRelativePath(const std::string& path) {
  if (path.empty() || path[0] == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("environment file '", path, "': must be a relative path"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("environment file '", path, "': '..' leaves the work directory"));
    }
  }
  return absl::OkStatus();
}

// lchown of a whole tree: never follows links the environment may contain.
// A file left with the worker's owner would be unwritable for the sandbox uid,
// so the first failure is an error.
absl::Status ChownTree(const fs::path& root, int uid) {
  auto chown_one = [uid](const fs::path& path) {
    if (lchown(path.c_str(), uid, uid) == 0) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat("cannot chown ", path.string(), " to uid ", uid, ": ", std::strerror(errno)));
  };
  if (absl::Status s = chown_one(root); !s.ok()) return s;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (absl::Status s = chown_one(it->path()); !s.ok()) return s;
  }
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot walk ", root.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status CopyEnvironmentDir(const std::string& task_root, const std::string& dir,
                                const fs::path& work) {
  if (task_root.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment dir '", dir, "': this worker serves no task directories (--task-root)"));
  }
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(task_root, ec);
  const fs::path from = fs::weakly_canonical(root / dir, ec);
  auto [end, unused] = std::mismatch(root.begin(), root.end(), from.begin(), from.end());
  if (ec || end != root.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment dir '", dir, "' is outside the worker's task root"));
  }
  if (!fs::is_directory(from, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment dir '", dir, "' is not a directory on this worker"));
  }
  absl::Status copied = CopyTree(from.string(), work.string(), CopyOptions());
  if (!copied.ok()) {
    return absl::InternalError(absl::StrCat("copying ", from.string(), ": ", copied.message()));
  }
  return absl::OkStatus();
}

// Whether workspace path `rel` is one of `patterns` or inside one.
bool InAnswer(const std::string& rel, const std::vector<std::string>& patterns) {
  for (const std::string& pattern : patterns) {
    if (fnmatch(pattern.c_str(), rel.c_str(), 0) == 0 || absl::StartsWith(rel, pattern + "/")) {
      return true;
    }
  }
  return false;
}

// `pristine` with the answer's paths replaced by those of `work` (deleted
// ones deleted), copied to `to`. Nothing outside the answer comes from
// `work`, not even a directory.
// `pristine_files` gets the files that came from `pristine`.
absl::Status CopyAnswer(const std::string& pristine, const std::string& work,
                        const std::vector<std::string>& patterns, const std::string& to,
                        CopyOptions options, std::vector<std::string>* pristine_files) {
  options.choose = [&](const std::string& rel, bool) {
    return InAnswer(rel, patterns) ? CopyChoice::kSkip : CopyChoice::kCopy;
  };
  options.copied_files = pristine_files;
  if (absl::Status s = CopyTree(pristine, to, options); !s.ok()) return s;
  options.choose = [&](const std::string& rel, bool) {
    return InAnswer(rel, patterns) ? CopyChoice::kCopy : CopyChoice::kSearch;
  };
  options.copied_files = nullptr;
  return CopyTree(work, to, options);
}

absl::Status MakeSessionDirs(const std::string& dir) {
  std::error_code ec;
  for (const char* sub : kSessionDirs) {
    if (!ec) fs::create_directories(fs::path(dir) / sub, ec);
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

// The sandbox's /etc, made once per worker directory: copies of the files
// and links of kEtcEntries, empty mount points for its directories (bound
// from the host by BwrapArgs: /etc/alternatives alone holds hundreds
// of links), loom.rc and the test runner. One bind for the files instead of
// one per entry saves about a millisecond per command. A root worker makes
// it a tmpfs of its own, so that /proc/self/mountinfo inside shows no host
// path.
absl::Status PrepareEtc(const SandboxConfig& config) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const fs::path etc = fs::path(config.root) / "etc";
  std::error_code ec;
  if (fs::exists(etc / "loom.rc", ec)) return absl::OkStatus();  // written last
  fs::create_directories(etc, ec);
  if (geteuid() == 0 && config.kernel_limits &&
      mount("loom", etc.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755") != 0) {
    return absl::InternalError(
        absl::StrCat("cannot mount ", etc.string(), ": ", std::strerror(errno)));
  }
  for (const char* entry : kEtcEntries) {
    const fs::path from = fs::path("/etc") / entry;
    const fs::file_status status = fs::symlink_status(from, ec);
    if (!fs::exists(status)) continue;
    if (fs::is_directory(status)) {
      fs::create_directory(etc / entry, ec);
    } else {
      fs::copy(from, etc / entry, fs::copy_options::copy_symlinks, ec);
    }
  }
  const fs::path runner = etc / fs::path(kTestRunnerPath).lexically_relative("/etc");
  fs::create_directories(runner.parent_path(), ec);
  std::ofstream(runner) << kTestRunnerPy;
  const fs::perms readable = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                             fs::perms::others_read | fs::perms::others_exec;
  fs::permissions(runner.parent_path(), readable, ec);
  fs::permissions(etc, readable, ec);
  std::ofstream(etc / "loom.rc") << (config.limits.processes > 0
                                         ? absl::StrReplaceAll(
                                               kRcFile,
                                               {{"{n}", std::to_string(config.limits.processes)}})
                                         : "");
  if (ec || !fs::exists(etc / "loom.rc")) {
    return absl::InternalError(absl::StrCat("preparing ", etc.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

// A process that exists and is not a zombie.
bool IsAlive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::optional<ProcStat> stat = ReadProcStat(pid);
  return !stat || stat->state != 'Z';
}

}  // namespace

absl::Status CheckFiles(const SandboxConfig& config,
                        const google::protobuf::Map<std::string, std::string>& files) {
  if (static_cast<int>(files.size()) > config.max_files) {
    return absl::InvalidArgumentError(absl::StrCat(files.size(), " environment files, over the ",
                                                   "worker's limit of ", config.max_files));
  }
  int64_t total = 0;
  for (const auto& [path, content] : files) {
    if (absl::Status s = CheckRelativePath(path); !s.ok()) return s;
    if (static_cast<int64_t>(content.size()) > config.max_file_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("environment file '", path, "' is ",
                                                     content.size(), " bytes, over the limit"));
    }
    total += static_cast<int64_t>(content.size());
  }
  if (total > config.max_files_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("environment files hold ", total,
                                                   " bytes, over the worker's limit of ",
                                                   config.max_files_bytes));
  }
  return absl::OkStatus();
}

Sandbox::Sandbox(const SandboxConfig& config, int slot, std::string dir)
    : config_(config), slot_(slot), dir_(std::move(dir)), bwrap_args_(BwrapArgs(config, dir_)) {
  if (geteuid() == 0) uid_ = config.uid_base + slot;
}

Sandbox::~Sandbox() {
  if (own_filesystem_) umount2(dir_.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
  DeleteTree(dir_).IgnoreError();
  DeleteTree(SnapshotDir()).IgnoreError();
}

CopyOptions Sandbox::CopyCaps() const {
  CopyOptions options;
  options.max_bytes = config_.caps.disk_bytes;
  options.max_entries = config_.caps.inodes;
  return options;
}

absl::Status Sandbox::Snapshot() const {
  DeleteTree(SnapshotDir()).IgnoreError();
  return CopyTree(dir_ + "/work", SnapshotDir(), CopyCaps());
}

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::ForVerification(
    const v1::Verification& verification) const {
  if (absl::Status s = CheckFiles(config_, verification.files()); !s.ok()) return s;
  const std::vector<std::string> answer_paths(verification.answer_paths().begin(),
                                              verification.answer_paths().end());
  std::error_code ec;
  if (!answer_paths.empty() && !fs::is_directory(SnapshotDir(), ec)) {
    return absl::FailedPreconditionError(
        "verification with answer_paths needs the workspace as the episode started (no snapshot)");
  }
  const std::string name = fs::path(dir_).filename().string() + "-verify";
  auto fresh = Create(config_, slot_, name, v1::Environment());
  if (!fresh.ok()) return fresh.status();
  Sandbox& verifier = **fresh;
  verifier.verifier_ = true;
  const std::string target = verifier.dir_ + "/work";
  CopyOptions options = CopyCaps();
  options.skip_bytecode = true;
  if (verifier.uid_ >= 0) options.uid = verifier.uid_;
  absl::Status copied = answer_paths.empty()
                            ? CopyTree(dir_ + "/work", target, options)
                            : CopyAnswer(SnapshotDir(), dir_ + "/work", answer_paths, target,
                                         options, &verifier.trusted_files_);
  if (!copied.ok()) return copied;
  for (const auto& [path, content] : verification.files()) {
    if (absl::Status s = WriteFileBeneath(target, path, content, options.uid); !s.ok()) return s;
    verifier.trusted_files_.push_back(path);
  }
  return fresh;
}

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::Create(const SandboxConfig& config, int slot,
                                                         const std::string& name,
                                                         const v1::Environment& environment) {
  if (absl::Status s = CheckFiles(config, environment.files()); !s.ok()) return s;
  if (absl::Status s = PrepareEtc(config); !s.ok()) return s;
  std::unique_ptr<Sandbox> sandbox(new Sandbox(config, slot, (fs::path(config.root) / name)));
  if (absl::Status s = sandbox->LimitByKernel(); !s.ok()) return s;
  if (absl::Status s = MakeSessionDirs(sandbox->dir_); !s.ok()) return s;
  const fs::path work = fs::path(sandbox->dir_) / "work";
  std::error_code ec;
  if (!environment.dir().empty()) {
    absl::Status s = CopyEnvironmentDir(config.task_root, environment.dir(), work);
    if (!s.ok()) return s;
  }
  for (const auto& [path, content] : environment.files()) {
    if (absl::Status s = WriteFileBeneath(work.string(), path, content); !s.ok()) return s;
  }
  if (sandbox->uid_ >= 0) {
    if (absl::Status s = ChownTree(sandbox->dir_, sandbox->uid_); !s.ok()) return s;
    // The sandbox uid must be able to reach its directory.
    fs::permissions(config.root, fs::perms::others_exec, fs::perm_options::add, ec);
  }
  chmod(sandbox->dir_.c_str(), 0700);
  sandbox->health_command_ = environment.health_command();
  return sandbox;
}

absl::StatusOr<ProcessResult> Sandbox::Bash(const std::string& command, double timeout_s,
                                            const std::vector<std::string>& args,
                                            const std::string& stdin_text) const {
  return Run(command, timeout_s, args, stdin_text, config_.output_cap);
}

absl::StatusOr<std::string> Sandbox::ArchiveWorkspace(int64_t max_bytes, double timeout_s) const {
  auto run = Run("tar --create --gzip --file=- --directory=/workspace .", timeout_s, {}, "",
                 static_cast<size_t>(std::max<int64_t>(max_bytes, 0)));
  if (!run.ok()) return run.status();
  if (run->truncated) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the workspace archive is over ", max_bytes, " bytes"));
  }
  if (run->exit_code != 0) {
    return absl::InternalError(absl::StrCat("archiving the workspace failed (exit ", run->exit_code,
                                            "): ", run->stderr_text));
  }
  return std::move(run->stdout_text);
}

absl::Status Sandbox::RestoreWorkspace(const std::string& archive, double timeout_s) const {
  auto run =
      Run("find /workspace -mindepth 1 -delete && "
          "tar --extract --gzip --file=- --directory=/workspace --no-same-owner",
          timeout_s, {}, archive, config_.output_cap);
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the workspace archive cannot be restored (tar exit ", run->exit_code,
                     "): ", absl::StripTrailingAsciiWhitespace(run->stderr_text),
                     run->limit.empty() ? "" : absl::StrCat(" (killed: ", run->limit, ")")));
  }
  return absl::OkStatus();
}

absl::StatusOr<ProcessResult> Sandbox::Serve(const std::string& command, double timeout_s,
                                             const SandboxEndpoint& endpoint) const {
  return Run(command, timeout_s, {}, "", config_.output_cap, &endpoint);
}

absl::StatusOr<ProcessResult> Sandbox::Run(const std::string& command, double timeout_s,
                                           const std::vector<std::string>& args,
                                           const std::string& stdin_text, size_t output_cap,
                                           const SandboxEndpoint* endpoint) const {
  UniqueFd seccomp;
  if (absl::Status s = SeccompFd(&seccomp); !s.ok()) return s;
  ProcessSpec spec;
  spec.argv = bwrap_args_;
  spec.pass_fds = {seccomp.get()};
  // With an endpoint, bubblewrap reports the sandbox's pid on fd 4 and holds
  // the command back until a byte arrives on fd 5 (netns_endpoint.h).
  int info[2] = {-1, -1};
  int block[2] = {-1, -1};
  if (endpoint != nullptr && (pipe2(info, O_CLOEXEC) != 0 || pipe2(block, O_CLOEXEC) != 0)) {
    return absl::ResourceExhaustedError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  UniqueFd info_read(info[0]), info_write(info[1]), block_read(block[0]), block_write(block[1]);
  if (endpoint != nullptr) {
    spec.argv.insert(spec.argv.end(), {"--info-fd", "4", "--block-fd", "5"});
    spec.pass_fds.insert(spec.pass_fds.end(), {info_write.get(), block_read.get()});
  }
  spec.argv.insert(spec.argv.end(), {"--", "/bin/bash", "-c", command, "sandbox"});
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=/tmp", "LANG=C.UTF-8",
              "PYTHONDONTWRITEBYTECODE=1", "BASH_ENV=/etc/loom.rc"};
  if (verifier_) {
    spec.env.insert(spec.env.end(), {"HOME=/tmp", "PYTHONNOUSERSITE=1"});
  } else if (endpoint != nullptr) {
    spec.env.push_back("HOME=/tmp");
    spec.env.insert(spec.env.end(), endpoint->env.begin(), endpoint->env.end());
  } else {
    spec.env.push_back("HOME=/workspace");
  }
  spec.stdin_text = stdin_text;
  spec.limits = config_.limits;
  // Set inside instead (loom.rc): on bwrap it would also count every other
  // sandbox and the worker's own threads under the same uid.
  spec.limits.processes = 0;
  if (endpoint != nullptr) {
    // node opens a file per module it loads, and reserves far more address
    // space than it uses (the cgroup's memory cap holds, where there is one).
    spec.limits.open_files = std::max<int64_t>(spec.limits.open_files, kHarnessOpenFiles);
    if (cgroup_ != nullptr) spec.limits.address_space = 0;
  }
  UsageWatch watch(config_.caps, dir_, /*memory=*/cgroup_ == nullptr,
                   /*disk=*/!own_filesystem_);
  const int64_t oom_kills = cgroup_ != nullptr ? cgroup_->oom_kills() : 0;
  std::atomic<bool> ended{false};
  std::mutex endpoint_mu;
  std::string endpoint_error;  // guarded by endpoint_mu
  std::thread opener;
  if (endpoint != nullptr) {
    opener = std::thread([&] {
      absl::Status opened = OpenNetnsEndpoint(info_read.get(), block_write.get(), endpoint->port,
                                              endpoint->serve, ended);
      std::lock_guard<std::mutex> lock(endpoint_mu);
      if (!opened.ok()) {
        endpoint_error = absl::StrCat("the endpoint could not be opened: ", opened.message());
      }
    });
  }
  spec.watch = [&](int pid) {
    std::string breach = OomBreach(oom_kills);
    if (breach.empty() && endpoint != nullptr) {
      std::lock_guard<std::mutex> lock(endpoint_mu);
      breach = endpoint_error;
    }
    if (breach.empty() && endpoint != nullptr && endpoint->stop) breach = endpoint->stop();
    return breach.empty() ? watch.Check(pid) : breach;
  };
  if (cgroup_ != nullptr) spec.join_fds = cgroup_->join_fds();
  spec.uid = uid_;
  spec.gid = uid_;
  spec.timeout_s = timeout_s;
  spec.output_cap = output_cap;
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  if (opener.joinable()) {
    ended = true;
    opener.join();
    if (result.ok() && !endpoint_error.empty()) return absl::UnavailableError(endpoint_error);
  }
  // An OOM kill in the command's last moments, after the watch looked.
  if (result.ok() && result->limit.empty()) {
    result->limit = OomBreach(oom_kills);
    if (!result->limit.empty())
      absl::StrAppend(&result->stderr_text, "\n[loom: killed: ", result->limit, "]\n");
  }
  return result;
}

std::string Sandbox::OomBreach(int64_t oom_kills) const {
  if (cgroup_ == nullptr || cgroup_->oom_kills() <= oom_kills) return "";
  return absl::StrCat("the sandbox went over its memory cap of ", config_.caps.memory_bytes >> 20,
                      " MiB (the kernel's OOM killer ended a process)");
}

absl::Status Sandbox::LimitByKernel() {
  if (!config_.kernel_limits) return absl::OkStatus();
  if (Cgroup::Available().ok()) {
    static std::atomic<int64_t> next_group{0};
    CgroupLimits limits;
    limits.memory_bytes = config_.caps.memory_bytes;
    // RLIMIT_NPROC inside (loom.rc) says "fork: Resource temporarily
    // unavailable" first; pids.max backs it, with room for bwrap's own.
    limits.tasks = config_.limits.processes > 0 ? config_.limits.processes + 16 : 0;
    limits.cpus = config_.caps.cpus;
    // Named by slot, never by session id: /proc/self/cgroup is readable inside.
    auto group = Cgroup::Create(absl::StrCat("slot", slot_, "-", next_group++), limits);
    if (!group.ok()) return group.status();
    cgroup_ = *std::move(group);
  }
  if (geteuid() != 0) return absl::OkStatus();
  const std::string options = absl::StrCat("size=", config_.caps.disk_bytes,
                                           ",nr_inodes=", config_.caps.inodes, ",mode=0700");
  if ((mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) ||
      mount("loom", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot mount the session's filesystem at ", dir_, ": ",
                                            std::strerror(errno)));
  }
  own_filesystem_ = true;
  return absl::OkStatus();
}

absl::Status CheckBubblewrap(const SandboxConfig& config) {
  if (access(config.bwrap.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("bubblewrap not found at ", config.bwrap,
                                                      " (install the bubblewrap package)"));
  }
  auto sandbox = Sandbox::Create(config, 0, "bwrap-check", v1::Environment());
  if (!sandbox.ok()) return sandbox.status();
  auto result = (*sandbox)->Bash("true", 10);
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("bubblewrap cannot create a sandbox here (user namespaces disabled?): ",
                     result->stderr_text));
  }
  return absl::OkStatus();
}

void CleanLeftovers(const std::string& root) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "w")) continue;
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(1), &pid) || pid <= 0) continue;
    if (pid == getpid() || IsAlive(pid)) continue;
    RemoveWorkerDirectory(entry.path().string()).IgnoreError();
  }
  Cgroup::CleanLeftovers();
}

absl::Status RemoveWorkerDirectory(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    umount2(entry.path().c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);  // a session's, or /etc
  }
  return DeleteTree(dir);
}

std::string KernelLimits(const SandboxConfig& config) {
  if (!config.kernel_limits) return "the worker's /proc watch (kernel limits turned off)";
  const absl::StatusOr<CgroupLayout> cgroups = Cgroup::Layout();
  const std::string memory =
      cgroups.ok()
          ? absl::StrCat("a cgroup per sandbox (", cgroups->Describe(), ")")
          : absl::StrCat("the worker's /proc watch for memory (", cgroups.status().message(), ")");
  const std::string disk = geteuid() == 0 ? "a sized tmpfs per session for disk and inodes"
                                          : "the worker's disk walk (a tmpfs needs a root worker)";
  return absl::StrCat(memory, "; ", disk);
}

}  // namespace loom::sandbox
