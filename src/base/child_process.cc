#include "loom/base/child_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace loom {
namespace {

// The child's environment: the parent's, less `unset_env` and the names that
// `set_env` replaces, then `set_env`.
std::vector<std::string> ChildEnvironment(const ChildOptions& options) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    bool dropped = false;
    for (const std::string& unset : options.unset_env) dropped = dropped || unset == name;
    for (const auto& [set, value] : options.set_env) dropped = dropped || set == name;
    if (!dropped) env.push_back(text);
  }
  for (const auto& [name, value] : options.set_env) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// In the child, from fork to exec: async-signal-safe calls only. An errno
// that stops it goes to the parent through `report` (close-on-exec, so a
// successful exec closes it with nothing written).
[[noreturn]] void BecomeChild(const ChildOptions& options, pid_t parent, int output, int input,
                              int report, const char* program, char* const* argv,
                              char* const* envp) {
  if (options.die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
  }
  if (options.signal_mask != nullptr) sigprocmask(SIG_SETMASK, options.signal_mask, nullptr);
  bool ok = true;
  if (output >= 0) ok = dup2(output, 1) >= 0 && dup2(output, 2) >= 0;
  if (ok && input >= 0) ok = dup2(input, 0) >= 0;
  if (ok) execve(program, argv, envp);
  const int error = errno;
  ssize_t written = write(report, &error, sizeof error);
  (void)written;
  _exit(127);
}

absl::StatusOr<int> OpenOrFail(const std::string& path, int flags, const char* what) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::UnavailableError(
        absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
  return fd;
}

}  // namespace

absl::StatusOr<pid_t> StartChild(const ChildOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("a child process needs an argv");
  std::vector<std::string> args = options.argv;
  std::vector<std::string> env = ChildEnvironment(options);
  std::vector<char*> argv = Pointers(args), envp = Pointers(env);
  const std::string program = options.program.empty() ? options.argv[0] : options.program;
  int output = -1, input = -1;
  if (!options.output.empty()) {
    const int mode = O_WRONLY | O_CREAT | (options.append_output ? O_APPEND : O_TRUNC);
    absl::StatusOr<int> fd = OpenOrFail(options.output, mode, "write");
    if (!fd.ok()) return fd.status();
    output = *fd;
  }
  if (options.null_stdin) input = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) report[0] = report[1] = -1;
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    BecomeChild(options, parent, output, input, report[1], program.c_str(), argv.data(),
                envp.data());
  }
  const int fork_error = errno;
  for (int fd : {output, input, report[1]}) {
    if (fd >= 0) close(fd);
  }
  if (pid < 0) {
    if (report[0] >= 0) close(report[0]);
    return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(fork_error)));
  }
  int exec_error = 0;
  ssize_t got = -1;
  if (report[0] >= 0) {
    do {
      got = read(report[0], &exec_error, sizeof exec_error);
    } while (got < 0 && errno == EINTR);
    close(report[0]);
  }
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    waitpid(pid, nullptr, 0);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run ", program, ": ", std::strerror(exec_error)));
  }
  return pid;
}

int ExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

absl::StatusOr<int> WaitChild(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("waiting for process ", pid, ": ", std::strerror(errno)));
    }
  }
  return ExitCode(status);
}

absl::StatusOr<std::optional<int>> PollChild(pid_t pid) {
  int status = 0;
  pid_t done;
  do {
    done = waitpid(pid, &status, WNOHANG);
  } while (done < 0 && errno == EINTR);
  if (done < 0) {
    return absl::InternalError(
        absl::StrCat("waiting for process ", pid, ": ", std::strerror(errno)));
  }
  if (done == 0) return std::optional<int>();
  return std::optional<int>(ExitCode(status));
}

void KillChild(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace loom
