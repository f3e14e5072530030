#include "loom/dist/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace loom::dist {
namespace {

struct Rank {
  pid_t pid = -1;
  bool running = false;
};

// 0 for a clean exit, the exit code, or 128 + the signal that killed it.
int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// In the child: the rank's environment, the default signal mask, then exec.
[[noreturn]] void ExecRank(const LaunchOptions& options, int rank, int port,
                           const sigset_t& original_mask) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  if (!options.log.empty()) {
    const int fd = open(options.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) {
      std::fprintf(stderr, "loom launch: cannot write %s: %s\n", options.log.c_str(),
                   std::strerror(errno));
      _exit(127);
    }
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(options.binary.c_str()));
  for (const std::string& a : options.args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(options.binary.c_str(), argv.data());
  std::fprintf(stderr, "loom launch: cannot run %s: %s\n", options.binary.c_str(),
               std::strerror(errno));
  _exit(127);
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
    const pid_t pid = fork();
    if (pid < 0) {
      for (const Rank& started : ranks) {
        if (started.running) kill(started.pid, SIGKILL);
      }
      sigprocmask(SIG_SETMASK, &original, nullptr);
      return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
    }
    if (pid == 0) ExecRank(options, r, port, original);
    ranks[static_cast<size_t>(r)] = {pid, true};
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
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (size_t r = 0; r < ranks.size(); ++r) {
        if (ranks[r].pid != pid || !ranks[r].running) continue;
        ranks[r].running = false;
        --running;
        const int code = ExitCode(status);
        if (code == 0) continue;
        if (exit_code == 0) {
          exit_code = code;
          killing = true;
          kill_at = Clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(options.grace_s * 1000));
        }
        spdlog::error("launch: rank {} (pid {}) exited with status {}{}", r, pid, code,
                      running > 0
                          ? absl::StrCat("; the other ranks have ", options.grace_s, " s to exit")
                          : "");
      }
    }
    if (killing && Clock::now() >= kill_at) {
      for (size_t r = 0; r < ranks.size(); ++r) {
        if (!ranks[r].running) continue;
        spdlog::error("launch: rank {} (pid {}) still running {} s after a rank failed: killing it",
                      r, ranks[r].pid, options.grace_s);
        kill(ranks[r].pid, SIGKILL);
      }
      killing = false;
    }
  }
  sigprocmask(SIG_SETMASK, &original, nullptr);
  return exit_code;
}

}  // namespace loom::dist
