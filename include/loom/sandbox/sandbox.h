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
// Each command still gets a container of its own, but (warm_containers)
// the next one is started right after a command ends: bubblewrap sets it up
// while the result travels to the client, and the container waits for a
// "go" on its stdin, reading the command the worker leaves in /.loom (a
// read-only directory of the session). With WarmSlots, a worker keeps such
// a container per slot between sessions too, over a directory per slot
// that is emptied when its session ends.
//
// When the worker runs as root, each sandbox slot runs under its own uid
// (uid_base + slot), never as root. A Sandbox is used by one thread at a time.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/sandbox/process.h"
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
  bool warm_containers = true;  // start each command's container ahead of it
};

class WarmSlots;

class Sandbox {
 public:
  // Creates the session directory `root/<name>`, copies the environment's
  // directory (relative to `task_root`) and files into work/.
  // INVALID_ARGUMENT for paths that leave the work dir or the task root, or a
  // missing `dir`; INTERNAL for filesystem failures.
  // With `warm`, the session uses the slot's directory and the container
  // kept for it (`name` is then only a label).
  static absl::StatusOr<std::unique_ptr<Sandbox>> Create(const SandboxConfig& config, int slot,
                                                         const std::string& name,
                                                         const v1::Environment& environment,
                                                         WarmSlots* warm = nullptr);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Runs `command` with bash -c inside the sandbox, in /workspace.
  // `args` become $1.. of the script; `stdin_text` its standard input.
  absl::StatusOr<ProcessResult> Bash(const std::string& command, double timeout_s,
                                     const std::vector<std::string>& args = {},
                                     const std::string& stdin_text = "") const;

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

 private:
  friend class WarmSlots;
  Sandbox(const SandboxConfig& config, int slot, std::string dir);
  std::string SnapshotDir() const { return dir_ + ".pristine"; }
  std::vector<std::string> Environment() const;
  // A container over this session running `command` (after bubblewrap's args).
  absl::StatusOr<std::unique_ptr<StartedProcess>> StartContainer(
      std::vector<std::string> command) const;
  // Starts the container for the next command, if none is waiting.
  void Prestart() const;
  absl::Status WriteCommand(const std::string& command, const std::vector<std::string>& args) const;

  const SandboxConfig& config_;
  int slot_;
  bool verifier_ = false;  // made by ForVerification
  int uid_ = -1;           // -1: the worker's own
  std::string dir_;
  std::vector<std::string> bwrap_args_;  // up to the command
  WarmSlots* warm_ = nullptr;
  mutable std::unique_ptr<StartedProcess> next_;  // started ahead, waiting for its command
};

// Per slot, a session directory and a container started over it, kept
// between sessions. Thread-safe.
class WarmSlots {
 public:
  // Starts containers for the first `prestarted` slots now; the others get
  // theirs when their first session ends.
  WarmSlots(const SandboxConfig& config, int slots, int prestarted);
  std::string Dir(int slot) const;  // root/slot<N>
  std::unique_ptr<StartedProcess> Take(int slot);
  void Put(int slot, std::unique_ptr<StartedProcess> container);

 private:
  const SandboxConfig& config_;
  std::mutex mu_;
  std::vector<std::unique_ptr<StartedProcess>> held_;
};

// Checks that bubblewrap can create a sandbox here (user namespaces allowed).
// The message says what failed and why, for tests and `loom worker`.
absl::Status CheckBubblewrap(const SandboxConfig& config);

// Removes session directories under `root` left by workers that no longer run.
void CleanLeftovers(const std::string& root);

}  // namespace loom::sandbox
