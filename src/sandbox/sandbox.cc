#include "loom/sandbox/sandbox.h"

#include <fnmatch.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "loom/config/files.h"
#include "loom/sandbox/seccomp.h"
#include "loom/sandbox/usage.h"

namespace loom::sandbox {
namespace fs = std::filesystem;
namespace {

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

// A file descriptor closed when it goes out of scope.
struct OwnedFd {
  int fd = -1;
  ~OwnedFd() {
    if (fd >= 0) close(fd);
  }
};

// The seccomp program in a fresh memfd, positioned at its start.
absl::Status SeccompFd(OwnedFd* out) {
  absl::StatusOr<std::string> program = SeccompProgram();
  if (!program.ok()) return program.status();
  out->fd = memfd_create("loom-seccomp", MFD_CLOEXEC);
  if (out->fd < 0 ||
      write(out->fd, program->data(), program->size()) != static_cast<ssize_t>(program->size()) ||
      lseek(out->fd, 0, SEEK_SET) != 0) {
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

absl::Status WriteEnvironmentFile(const fs::path& work, const std::string& rel,
                                  const std::string& content) {
  fs::path path = work / rel;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  if (ec || !out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
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
  fs::copy(from, work, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (ec) return absl::InternalError(absl::StrCat("copying ", from.string(), ": ", ec.message()));
  return absl::OkStatus();
}

// Copies a directory tree as it is: links stay links (never followed), and
// anything but files, directories and links (fifos, sockets) is left out, as
// are the files and links whose path relative to `from` `skip` names.
absl::Status CopyTree(const fs::path& from, const fs::path& to,
                      const std::function<bool(const std::string&)>& skip = nullptr) {
  std::error_code ec;
  fs::create_directories(to, ec);
  for (auto it = fs::recursive_directory_iterator(from, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    // Lexically: fs::relative would resolve a link the agent planted.
    const fs::path dest = to / it->path().lexically_relative(from);
    const fs::file_status status = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_directory(status)) {
      fs::create_directories(dest, ec);
    } else if ((fs::is_symlink(status) || fs::is_regular_file(status)) &&
               !(skip && skip(it->path().lexically_relative(from).string()))) {
      fs::copy(it->path(), dest, fs::copy_options::copy_symlinks, ec);
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("copying ", from.string(), " to ", to.string(), ": ", ec.message()));
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
// ones deleted), copied to `to`.
absl::Status CopyAnswer(const fs::path& pristine, const fs::path& work,
                        const std::vector<std::string>& patterns, const fs::path& to) {
  auto in_answer = [&](const std::string& rel) { return InAnswer(rel, patterns); };
  if (absl::Status s = CopyTree(pristine, to, in_answer); !s.ok()) return s;
  // Only the answer's files of the agent's, with just the directories they need.
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(work, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const std::string rel = it->path().lexically_relative(work).string();
    const fs::file_status status = it->symlink_status(ec);
    if (ec || fs::is_directory(status) || !InAnswer(rel, patterns)) continue;
    if (fs::is_symlink(status) || fs::is_regular_file(status)) {
      fs::create_directories((to / rel).parent_path(), ec);
      fs::copy(it->path(), to / rel, fs::copy_options::copy_symlinks, ec);
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("copying the answer: ", ec.message()));
  return absl::OkStatus();
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
// of links), and loom.rc. One bind for the files instead of one per entry
// saves about a millisecond per command.
absl::Status PrepareEtc(const SandboxConfig& config) {
  const fs::path etc = fs::path(config.root) / "etc";
  std::error_code ec;
  if (fs::is_directory(etc, ec)) return absl::OkStatus();
  // Built aside and renamed into place, so that a concurrent Create never sees half of it.
  const fs::path building = absl::StrCat(etc.string(), ".", gettid());
  fs::create_directories(building, ec);
  for (const char* entry : kEtcEntries) {
    const fs::path from = fs::path("/etc") / entry;
    const fs::file_status status = fs::symlink_status(from, ec);
    if (!fs::exists(status)) continue;
    if (fs::is_directory(status)) {
      fs::create_directory(building / entry, ec);
    } else {
      fs::copy(from, building / entry, fs::copy_options::copy_symlinks, ec);
    }
  }
  std::ofstream(building / "loom.rc")
      << (config.limits.processes > 0
              ? absl::StrReplaceAll(kRcFile, {{"{n}", std::to_string(config.limits.processes)}})
              : "");
  fs::permissions(building,
                  fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec,
                  ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("preparing ", building.string(), ": ", ec.message()));
  }
  fs::rename(building, etc, ec);
  if (ec) RemoveTree(building.string()).IgnoreError();  // another thread was first
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
  RemoveTree(dir_).IgnoreError();
  RemoveTree(SnapshotDir()).IgnoreError();
}

absl::Status Sandbox::Snapshot() const {
  RemoveTree(SnapshotDir()).IgnoreError();
  return CopyTree(fs::path(dir_) / "work", SnapshotDir());
}

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::ForVerification(
    const v1::Verification& verification) const {
  if (absl::Status s = CheckFiles(config_, verification.files()); !s.ok()) return s;
  const std::vector<std::string> answer_paths(verification.answer_paths().begin(),
                                              verification.answer_paths().end());
  const fs::path work = fs::path(dir_) / "work";
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
  const fs::path target = fs::path(verifier.dir_) / "work";
  absl::Status copied = answer_paths.empty()
                            ? CopyTree(work, target)
                            : CopyAnswer(SnapshotDir(), work, answer_paths, target);
  if (!copied.ok()) return copied;
  for (const auto& [path, content] : verification.files()) {
    if (absl::Status s = WriteEnvironmentFile(target, path, content); !s.ok()) return s;
  }
  if (verifier.uid_ >= 0) {
    if (absl::Status s = ChownTree(verifier.dir_, verifier.uid_); !s.ok()) return s;
  }
  return fresh;
}

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::Create(const SandboxConfig& config, int slot,
                                                         const std::string& name,
                                                         const v1::Environment& environment) {
  if (absl::Status s = CheckFiles(config, environment.files()); !s.ok()) return s;
  if (absl::Status s = PrepareEtc(config); !s.ok()) return s;
  std::unique_ptr<Sandbox> sandbox(new Sandbox(config, slot, (fs::path(config.root) / name)));
  if (absl::Status s = MakeSessionDirs(sandbox->dir_); !s.ok()) return s;
  const fs::path work = fs::path(sandbox->dir_) / "work";
  std::error_code ec;
  if (!environment.dir().empty()) {
    absl::Status s = CopyEnvironmentDir(config.task_root, environment.dir(), work);
    if (!s.ok()) return s;
  }
  for (const auto& [path, content] : environment.files()) {
    if (absl::Status s = WriteEnvironmentFile(work, path, content); !s.ok()) return s;
  }
  if (sandbox->uid_ >= 0) {
    if (absl::Status s = ChownTree(sandbox->dir_, sandbox->uid_); !s.ok()) return s;
    // The sandbox uid must be able to reach its directory.
    fs::permissions(config.root, fs::perms::others_exec, fs::perm_options::add, ec);
  }
  chmod(sandbox->dir_.c_str(), 0700);
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

absl::StatusOr<ProcessResult> Sandbox::Run(const std::string& command, double timeout_s,
                                           const std::vector<std::string>& args,
                                           const std::string& stdin_text, size_t output_cap) const {
  OwnedFd seccomp;
  if (absl::Status s = SeccompFd(&seccomp); !s.ok()) return s;
  ProcessSpec spec;
  spec.argv = bwrap_args_;
  spec.argv.insert(spec.argv.end(), {"--", "/bin/bash", "-c", command, "sandbox"});
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=/tmp", "LANG=C.UTF-8",
              "PYTHONDONTWRITEBYTECODE=1", "BASH_ENV=/etc/loom.rc"};
  if (verifier_) {
    spec.env.insert(spec.env.end(), {"HOME=/tmp", "PYTHONNOUSERSITE=1"});
  } else {
    spec.env.push_back("HOME=/workspace");
  }
  spec.stdin_text = stdin_text;
  spec.limits = config_.limits;
  // Set inside instead (loom.rc): on bwrap it would also count every other
  // sandbox and the worker's own threads under the same uid.
  spec.limits.processes = 0;
  spec.fd3 = seccomp.fd;
  UsageWatch watch(config_.caps, dir_);
  spec.watch = [&watch](int pid) { return watch.Check(pid); };
  spec.uid = uid_;
  spec.gid = uid_;
  spec.timeout_s = timeout_s;
  spec.output_cap = output_cap;
  return RunProcess(spec);
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
    RemoveTree(entry.path().string()).IgnoreError();
  }
}

}  // namespace loom::sandbox
