#pragma once
// Sandbox: one isolated environment for one session. It owns a private
// directory on the worker (`work/`, seen inside as /workspace, `tmp/` as
// /tmp and `shm/` as /dev/shm) and runs every command in a fresh bubblewrap
// container over it:
//   - all namespaces unshared (no network: even the host's loopback is
//     unreachable), no capabilities, and no further user namespaces
//     (--disable-userns);
//   - a seccomp filter (seccomp.h) against the rest of the kernel surface;
//   - /usr and the library directories read-only, and of /etc only what
//     bash and python read (the dynamic linker's cache, passwd and group,
//     alternatives, localtime, nsswitch.conf, os-release, python3*): no
//     host secret there is visible; nothing else of the host either;
//   - per-process rlimits (CPU, address space, file size, open files, no
//     core dumps), and caps of the sandbox as a whole: processes through
//     RLIMIT_NPROC set inside the sandbox's own user namespace, where the
//     kernel counts per namespace (so a fork bomb in one sandbox leaves
//     others able to fork, whatever uid the worker runs as); memory, disk
//     and inodes through a UsageWatch (usage.h) that kills the command;
//   - a wall-clock timeout that kills the whole process tree; output capped.
// The directory persists between commands of the session and is deleted
// with the Sandbox.
//
// When the worker runs as root, each sandbox slot runs under its own uid
// (uid_base + slot), never as root. A Sandbox is used by one thread at a time.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/sandbox/process.h"
#include "loom/sandbox/tree.h"
#include "loom/sandbox/usage.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::sandbox {

struct SandboxConfig {
  std::string root;  // worker-private directory holding session dirs
  std::string bwrap = "/usr/bin/bwrap";
  ResourceLimits limits{/*cpu_seconds=*/60, /*address_space=*/2LL << 30,
                        /*file_size=*/256LL << 20, /*processes=*/128, /*open_files=*/256};
  SandboxCaps caps;                    // the whole sandbox's memory, disk and inodes
  size_t output_cap = 64 * 1024;       // bytes per stream and command
  int uid_base = 200000;               // root only: sandbox slot s runs as uid_base + s
  int64_t max_file_bytes = 16 << 20;   // largest file an Environment may carry
  int max_files = 10000;               // files an Environment (or Verification) may carry
  int64_t max_files_bytes = 64 << 20;  // all of them together
  // Environment `dir`s are resolved under this directory and may not leave
  // it; "" = this worker serves no task directories.
  std::string task_root;
  // The kernel enforces the caps where it can (a cgroup per sandbox, a sized
  // tmpfs per session: KernelLimits()); false: the UsageWatch always does.
  bool kernel_limits = true;
  // Agent harnesses (their node_modules), shown read-only at
  // /opt/loom/harness in every sandbox; "" = none.
  std::string harness_dir;
  // Episodes are probed for an environment the agent broke (health.h);
  // false: never (no repercussion signal, one command less per episode).
  bool health_probe = true;
};

// How this worker's sandboxes are limited, in words: the kernel's cgroups
// and filesystems, or the /proc watch and why (start-up log, Status).
std::string KernelLimits(const SandboxConfig& config);

class Cgroup;

// A model endpoint inside a command's own network namespace (Sandbox::Serve).
struct SandboxEndpoint {
  int port = 8000;               // 127.0.0.1:port inside the sandbox
  std::vector<std::string> env;  // "K=V", added to the command's environment
  // Gets the listening socket, and owns it, before the command starts.
  std::function<void(int listen_fd)> serve;
  // Polled while the command runs: a non-empty answer kills the command and
  // becomes its ProcessResult::limit.
  std::function<std::string()> stop;
};

class Sandbox {
 public:
  // Creates the session directory `root/<name>`, copies the environment's
  // directory (relative to `task_root`) and files into work/.
  // INVALID_ARGUMENT for paths that leave the work dir or the task root, or a
  // missing `dir`; INTERNAL for filesystem failures.
  static absl::StatusOr<std::unique_ptr<Sandbox>> Create(const SandboxConfig& config, int slot,
                                                         const std::string& name,
                                                         const v1::Environment& environment);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Runs `command` with bash -c inside the sandbox, in /workspace.
  // `args` become $1.. of the script; `stdin_text` its standard input.
  absl::StatusOr<ProcessResult> Bash(const std::string& command, double timeout_s,
                                     const std::vector<std::string>& args = {},
                                     const std::string& stdin_text = "") const;

  // Runs `command` as Bash does, as an agent harness: HOME=/tmp, `endpoint`'s
  // environment added, and a socket listening at 127.0.0.1:endpoint.port in
  // the command's own network namespace handed to endpoint.serve before the
  // command starts (it never runs without it; nothing else is reachable).
  // At least 4096 open files, and where a cgroup caps the sandbox's memory,
  // no address-space rlimit (node reserves far more than it uses). A status
  // only when the command could not be started, or (UNAVAILABLE) when its
  // endpoint could not be opened: that kills the command before it runs,
  // and it is the worker's failure, not the command's.
  absl::StatusOr<ProcessResult> Serve(const std::string& command, double timeout_s,
                                      const SandboxEndpoint& endpoint) const;

  // The workspace as a gzip-compressed tar archive, made inside the sandbox
  // (so a link the agent planted is archived as a link, never followed out).
  // RESOURCE_EXHAUSTED when the archive would exceed `max_bytes`.
  absl::StatusOr<std::string> ArchiveWorkspace(int64_t max_bytes, double timeout_s) const;
  // Replaces the workspace with an archive's contents, unpacked inside the
  // sandbox under its caps. INVALID_ARGUMENT when tar cannot read it.
  absl::Status RestoreWorkspace(const std::string& archive, double timeout_s) const;

  // Keeps a copy of the workspace as it is now, outside every mount a
  // command sees: the environment a verification with answer_paths starts
  // from. Taken when an episode starts.
  absl::Status Snapshot() const;

  // A fresh sandbox in the same slot for verifying this one's work (see
  // v1::Verification): a new workspace (this one's, or the snapshot with the
  // answer paths taken from this one), the verification's hidden files
  // written over it, empty /tmp and /dev/shm, HOME=/tmp and
  // PYTHONNOUSERSITE=1, so nothing the agent left outside its answer runs.
  // FAILED_PRECONDITION when answer_paths are given and no snapshot exists.
  absl::StatusOr<std::unique_ptr<Sandbox>> ForVerification(
      const v1::Verification& verification) const;

  const std::string& dir() const { return dir_; }
  // The environment's check that it is still usable (see health.h).
  const std::string& health_command() const { return health_command_; }
  const SandboxConfig& config() const { return config_; }
  // The session's files are on a tmpfs of its own, of the disk cap's size
  // (the kernel refuses a write past it); false: the watch caps them.
  bool own_filesystem() const { return own_filesystem_; }
  // A verification sandbox's workspace files that are not the agent's: the
  // hidden files and, with answer_paths, the snapshot's files outside them.
  const std::vector<std::string>& trusted_files() const { return trusted_files_; }

 private:
  Sandbox(const SandboxConfig& config, int slot, std::string dir);
  std::string SnapshotDir() const { return dir_ + ".pristine"; }
  CopyOptions CopyCaps() const;  // a copy of a workspace within the sandbox's disk caps
  // A cgroup and a sized tmpfs at dir_, where this worker may make them.
  absl::Status LimitByKernel();
  // The kill that the cgroup's OOM killer's events since `oom_kills` call for ("": none).
  std::string OomBreach(int64_t oom_kills) const;
  absl::StatusOr<ProcessResult> Run(const std::string& command, double timeout_s,
                                    const std::vector<std::string>& args,
                                    const std::string& stdin_text, size_t output_cap,
                                    const SandboxEndpoint* endpoint = nullptr) const;

  const SandboxConfig& config_;
  int slot_;
  bool verifier_ = false;  // made by ForVerification
  int uid_ = -1;           // -1: the worker's own
  std::string dir_;
  std::vector<std::string> bwrap_args_;  // up to the command
  std::vector<std::string> trusted_files_;
  std::string health_command_;
  std::unique_ptr<Cgroup> cgroup_;  // null: the watch caps memory
  bool own_filesystem_ = false;     // dir_ is a tmpfs of the sandbox's size
};

// INVALID_ARGUMENT for files an Environment (or a Verification) may not
// carry: a path that is absolute or leaves the work directory, a file over
// `max_file_bytes`, more than `max_files`, more than `max_files_bytes`.
absl::Status CheckFiles(const SandboxConfig& config,
                        const google::protobuf::Map<std::string, std::string>& files);

// Checks that bubblewrap can create a sandbox here (user namespaces allowed).
// The message says what failed and why, for tests and `loom worker`.
absl::Status CheckBubblewrap(const SandboxConfig& config);

// Removes session directories under `root` left by workers that no longer run
// (and their cgroups).
void CleanLeftovers(const std::string& root);

// Removes a worker's directory, unmounting its sessions' filesystems first.
absl::Status RemoveWorkerDirectory(const std::string& dir);

}  // namespace loom::sandbox
