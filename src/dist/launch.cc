#include "loom/dist/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "loom/base/child_process.h"

namespace loom::dist {
namespace {

struct Rank {
  pid_t pid = -1;
  bool running = false;
};

// The rank's process: the torchrun-style environment, the default signal
// mask, and its output to the launch log when there is one.
ChildOptions RankProcess(const LaunchOptions& options, int rank, int port,
                         const sigset_t& original_mask) {
  ChildOptions child;
  child.argv.push_back(options.binary);
  child.argv.insert(child.argv.end(), options.args.begin(), options.args.end());
  child.set_env = {{"RANK", std::to_string(rank)},
                   {"LOCAL_RANK", std::to_string(rank)},
                   {"WORLD_SIZE", std::to_string(options.nproc)},
                   {"LOCAL_WORLD_SIZE", std::to_string(options.nproc)},
                   {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(port)}};
  child.signal_mask = &original_mask;
  child.output = options.log;
  child.append_output = true;
  return child;
}

}  // namespace

absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t length = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::UnavailableError("cannot find a free port on 127.0.0.1: " + error);
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

absl::StatusOr<int> LaunchLocal(const LaunchOptions& options) {
  if (options.nproc < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--nproc ", options.nproc, ": need at least 1"));
  }
  if (options.args.empty()) {
    return absl::InvalidArgumentError("nothing to launch: give the command after --");
  }
  int port = options.master_port;
  if (port == 0) {
    auto free_port = FreeLoopbackPort();
    if (!free_port.ok()) return free_port.status();
    port = *free_port;
  }
  // The signals the launcher waits for, blocked so sigtimedwait takes them.
  sigset_t waited, original;
  sigemptyset(&waited);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGCHLD}) sigaddset(&waited, sig);
  sigprocmask(SIG_BLOCK, &waited, &original);

  std::vector<Rank> ranks(static_cast<size_t>(options.nproc));
  for (int r = 0; r < options.nproc; ++r) {
    absl::StatusOr<pid_t> pid = StartChild(RankProcess(options, r, port, original));
    if (!pid.ok()) {
      for (const Rank& started : ranks) {
        if (started.running) KillChild(started.pid);
      }
      sigprocmask(SIG_SETMASK, &original, nullptr);
      return absl::UnavailableError(
          absl::StrCat("loom launch: rank ", r, ": ", pid.status().message()));
    }
    ranks[static_cast<size_t>(r)] = {*pid, true};
  }
  spdlog::info("launch: {} ranks on 127.0.0.1:{}", options.nproc, port);

  using Clock = std::chrono::steady_clock;
  int exit_code = 0, running = options.nproc;
  bool killing = false;  // a rank failed: kill the others at kill_at
  Clock::time_point kill_at;
  while (running > 0) {
    timespec tick{0, 100'000'000};
    const int sig = sigtimedwait(&waited, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT || sig == SIGUSR1) {
      spdlog::info("launch: forwarding signal {} to every rank", sig);
      for (const Rank& rank : ranks) {
        if (rank.running) kill(rank.pid, sig);
      }
    }
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (!ranks[r].running) continue;
      absl::StatusOr<std::optional<int>> exited = PollChild(ranks[r].pid);
      if (exited.ok() && !exited->has_value()) continue;
      ranks[r].running = false;
      --running;
      const int code = exited.ok() ? **exited : 1;
      const pid_t pid = ranks[r].pid;
      if (code == 0) continue;
      if (exit_code == 0) {
        exit_code = code;
        killing = true;
        kill_at =
            Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(options.grace_s * 1000));
      }
      spdlog::error("launch: rank {} (pid {}) exited with status {}{}", r, pid, code,
                    running > 0
                        ? absl::StrCat("; the other ranks have ", options.grace_s, " s to exit")
                        : "");
    }
    if (killing && Clock::now() >= kill_at) {
      for (size_t r = 0; r < ranks.size(); ++r) {
        if (!ranks[r].running) continue;
        spdlog::error("launch: rank {} (pid {}) still running {} s after a rank failed: killing it",
                      r, ranks[r].pid, options.grace_s);
        kill(ranks[r].pid, SIGKILL);  // reaped by PollChild like any rank
      }
      killing = false;
    }
  }
  sigprocmask(SIG_SETMASK, &original, nullptr);
  return exit_code;
}

}  // namespace loom::dist
