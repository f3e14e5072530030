#include "loom/sandbox/process.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::sandbox {
namespace {

using Clock = std::chrono::steady_clock;

// After the main child exits, or after a kill, how long leftover holders of
// the output pipes get before we stop reading.
constexpr auto kDrainGrace = std::chrono::milliseconds(500);
constexpr int kMaxPassedFds = 8;

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void SetLimit(int resource, int64_t value) {
  if (value <= 0) return;
  rlimit limit{static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
  setrlimit(resource, &limit);
}

// Runs in the child between clone and exec. The child shares the parent's
// memory (CLONE_VM), so: async-signal-safe calls only, and raw syscalls for
// the ids — glibc's setuid/setgid/setgroups would signal every thread of the
// parent to change theirs too.
[[noreturn]] void ExecChild(const ProcessSpec& spec, char** argv, char** envp, int in_fd,
                            int out_fd, int err_fd) {
  // The parent's handlers must not run here (signals are blocked until now).
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, nullptr);
  }
  setsid();  // own session and process group, no controlling terminal
  for (int fd : spec.join_fds) {
    if (write(fd, "0", 1) != 1) _exit(126);  // "0": the writer itself
  }
  dup2(in_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  // Each passed descriptor goes above the numbers it is to take first, so
  // that no dup2 overwrites one still to be moved.
  const int passed = static_cast<int>(spec.pass_fds.size());
  int high[kMaxPassedFds];
  for (int i = 0; i < passed; ++i) {
    high[i] = fcntl(spec.pass_fds[i], F_DUPFD, 3 + passed);
    if (high[i] < 0) _exit(126);
  }
  for (int i = 0; i < passed; ++i) dup2(high[i], 3 + i);
  const unsigned first_closed = 3 + static_cast<unsigned>(passed);
  syscall(SYS_close_range, first_closed, ~0u, 0u);
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  SetLimit(RLIMIT_CPU, spec.limits.cpu_seconds);
  SetLimit(RLIMIT_AS, spec.limits.address_space);
  SetLimit(RLIMIT_FSIZE, spec.limits.file_size);
  SetLimit(RLIMIT_NPROC, spec.limits.processes);
  SetLimit(RLIMIT_NOFILE, spec.limits.open_files);
  if (spec.gid >= 0 &&
      (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setgid, spec.gid) != 0)) {
    _exit(126);
  }
  if (spec.uid >= 0 && syscall(SYS_setuid, spec.uid) != 0) _exit(126);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);  // the worker blocks SIGTERM for sigwait
  execve(argv[0], argv, envp);
  _exit(127);
}

struct ChildArgs {
  const ProcessSpec* spec;
  char** argv;
  char** envp;
  int in_fd, out_fd, err_fd;
};

int ChildMain(void* arg) {
  const ChildArgs& a = *static_cast<const ChildArgs*>(arg);
  ExecChild(*a.spec, a.argv, a.envp, a.in_fd, a.out_fd, a.err_fd);
}

// Starts the child without copying the parent's page tables: fork() of a
// worker with LibTorch mapped costs ~6 ms, clone(CLONE_VM | CLONE_VFORK)
// ~0.1 ms (we resume once the child has exec'd or died). Every signal stays
// blocked in between so that no handler of ours runs on the child.
pid_t SpawnChild(ChildArgs& args) {
  std::vector<char> stack(64 * 1024);
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  const pid_t pid =
      clone(ChildMain, stack.data() + stack.size(), CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  errno = clone_errno;
  return pid;
}

// Keeps the first `cap` bytes of a stream and counts the rest.
struct CappedBuffer {
  std::string text;
  size_t dropped = 0;
  void Append(const char* data, size_t n, size_t cap) {
    size_t room = text.size() < cap ? cap - text.size() : 0;
    size_t keep = n < room ? n : room;
    text.append(data, keep);
    dropped += n - keep;
  }
  void Finish() {
    if (dropped > 0)
      absl::StrAppend(&text, "\n[loom: output truncated, ", dropped, " bytes dropped]\n");
  }
};

struct Pipes {
  int in[2] = {-1, -1};
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  ~Pipes() {
    for (int* p : {in, out, err}) {
      for (int i = 0; i < 2; ++i) {
        if (p[i] >= 0) close(p[i]);
      }
    }
  }
};

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// The parent's side: pumps stdin, drains stdout/stderr, enforces the deadline.
class Pump {
 public:
  Pump(const ProcessSpec& spec, pid_t pid, Pipes& pipes)
      : spec_(spec), pid_(pid), in_(pipes.in[1]), out_(pipes.out[0]), err_(pipes.err[0]) {
    pipes.in[1] = pipes.out[0] = pipes.err[0] = -1;
    for (int fd : {in_, out_, err_}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (spec_.stdin_text.empty()) CloseFd(in_);
    // Readable when the child exits, so poll wakes at once (Linux >= 5.3).
    pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  }
  ~Pump() { CloseFd(pidfd_); }

  ProcessResult Run() {
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline =
        start + std::chrono::milliseconds(static_cast<int64_t>(spec_.timeout_s * 1000));
    Clock::time_point drain_until = Clock::time_point::max();
    // Commands shorter than one interval are never watched.
    Clock::time_point next_watch = start + std::chrono::milliseconds(spec_.watch_interval_ms);
    // Kills the whole group; what still holds the pipes gets the grace period.
    auto kill_group = [&](Clock::time_point now) {
      killpg(pid_, SIGKILL);
      drain_until = std::min(drain_until, now + kDrainGrace);
    };
    // Until the child has exited and its output is drained (or the grace
    // period after its exit or kill has passed).
    while (true) {
      const Clock::time_point now = Clock::now();
      if (!exited_ && Reap(false)) kill_group(now);  // leftovers of an exited command
      if ((exited_ && out_ < 0 && err_ < 0) || now >= drain_until) break;
      if (!timed_out_ && now >= deadline) {
        timed_out_ = true;
        kill_group(now);
      }
      const bool watching = spec_.watch && !exited_ && !timed_out_ && limit_.empty();
      if (watching && now >= next_watch) {
        limit_ = spec_.watch(pid_);
        next_watch = now + std::chrono::milliseconds(spec_.watch_interval_ms);
        if (!limit_.empty()) kill_group(now);
      }
      const Clock::time_point next_deadline =
          std::min(timed_out_ ? drain_until : deadline,
                   watching && limit_.empty() ? next_watch : Clock::time_point::max());
      PollOnce(std::min({next_deadline, drain_until, now + std::chrono::milliseconds(20)}) - now);
    }
    CloseFd(in_);
    CloseFd(out_);
    CloseFd(err_);
    if (!exited_) {
      killpg(pid_, SIGKILL);
      Reap(true);
    }
    ProcessResult result;
    result.exit_code = exit_code_;
    result.timed_out = timed_out_;
    result.limit = limit_;
    out_buf_.Finish();
    err_buf_.Finish();
    if (!limit_.empty()) absl::StrAppend(&err_buf_.text, "[loom: killed: ", limit_, "]\n");
    result.truncated = out_buf_.dropped > 0 || err_buf_.dropped > 0;
    result.stdout_text = std::move(out_buf_.text);
    result.stderr_text = std::move(err_buf_.text);
    result.duration_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    return result;
  }

 private:
  bool Reap(bool block) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, block ? 0 : WNOHANG);
    if (r != pid_) return false;
    exited_ = true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  }

  void PollOnce(Clock::duration wait) {
    pollfd fds[4];
    int n = 0;
    if (pidfd_ >= 0 && !exited_) fds[n++] = {pidfd_, POLLIN, 0};
    for (int fd : {out_, err_}) {
      if (fd >= 0) fds[n++] = {fd, POLLIN, 0};
    }
    if (in_ >= 0) fds[n++] = {in_, POLLOUT, 0};
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
    if (poll(fds, n, ms < 1 ? 1 : ms) <= 0) return;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0 || fds[i].fd == pidfd_) continue;
      if (fds[i].fd == in_) {
        WriteStdin();
      } else {
        ReadInto(fds[i].fd == out_ ? out_ : err_, fds[i].fd == out_ ? out_buf_ : err_buf_);
      }
    }
  }

  void ReadInto(int& fd, CappedBuffer& buffer) {
    char chunk[16384];
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n > 0) {
      buffer.Append(chunk, static_cast<size_t>(n), spec_.output_cap);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      CloseFd(fd);
    }
  }

  void WriteStdin() {
    const std::string& text = spec_.stdin_text;
    ssize_t n = write(in_, text.data() + written_, text.size() - written_);
    if (n > 0) written_ += static_cast<size_t>(n);
    if ((n < 0 && errno != EAGAIN && errno != EINTR) || written_ == text.size()) CloseFd(in_);
  }

  const ProcessSpec& spec_;
  pid_t pid_;
  int in_, out_, err_;
  int pidfd_ = -1;
  size_t written_ = 0;
  CappedBuffer out_buf_, err_buf_;
  bool timed_out_ = false;
  std::string limit_;
  bool exited_ = false;
  int exit_code_ = -1;
};

}  // namespace

absl::StatusOr<ProcessResult> RunProcess(const ProcessSpec& spec) {
  static std::once_flag ignore_sigpipe;
  std::call_once(ignore_sigpipe, [] { signal(SIGPIPE, SIG_IGN); });
  if (spec.argv.empty()) return absl::InvalidArgumentError("RunProcess: empty argv");
  if (spec.pass_fds.size() > kMaxPassedFds) {
    return absl::InvalidArgumentError("RunProcess: more than 8 descriptors to pass");
  }
  Pipes pipes;
  if (pipe2(pipes.in, O_CLOEXEC) != 0 || pipe2(pipes.out, O_CLOEXEC) != 0 ||
      pipe2(pipes.err, O_CLOEXEC) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<char*> argv = CStrings(spec.argv);
  std::vector<char*> envp = CStrings(spec.env);
  ChildArgs args{&spec, argv.data(), envp.data(), pipes.in[0], pipes.out[1], pipes.err[1]};
  pid_t pid = SpawnChild(args);
  if (pid < 0) return absl::ResourceExhaustedError(absl::StrCat("clone: ", std::strerror(errno)));
  setpgid(pid, pid);
  CloseFd(pipes.in[0]);
  CloseFd(pipes.out[1]);
  CloseFd(pipes.err[1]);
  return Pump(spec, pid, pipes).Run();
}

}  // namespace loom::sandbox
