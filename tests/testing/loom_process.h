#pragma once
// LoomProcess: the real `loom` binary started as a child process that the
// test can signal, poll and wait for (tests/testing/temp_dir.h's RunLoom runs
// one to completion instead). Its stdout and stderr are appended to a log
// file. A process still running when the object dies is killed.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace loom::testing {

class LoomProcess {
 public:
  // Runs `loom args...` with output appended to `log`.
  LoomProcess(const std::vector<std::string>& args, const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* out = std::freopen(log.c_str(), "a", stdout);
      FILE* err = std::freopen(log.c_str(), "a", stderr);
      (void)out;
      (void)err;
      std::vector<const char*> argv = {LOOM_BINARY};
      for (const std::string& arg : args) argv.push_back(arg.c_str());
      argv.push_back(nullptr);
      ::execv(LOOM_BINARY, const_cast<char* const*>(argv.data()));
      ::_exit(127);
    }
  }
  ~LoomProcess() {
    if (exited_ < 0) {
      ::kill(pid_, SIGKILL);
      Wait();
    }
  }
  LoomProcess(const LoomProcess&) = delete;
  LoomProcess& operator=(const LoomProcess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int signal_number) { ::kill(pid_, signal_number); }

  // Exit status, or 128 + signal.
  int Wait() {
    if (exited_ >= 0) return exited_;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exited_ = ExitCode(status);
    return exited_;
  }

  bool Running() {
    if (exited_ >= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == 0) return true;
    exited_ = ExitCode(status);
    return false;
  }

 private:
  static int ExitCode(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  pid_t pid_ = -1;
  int exited_ = -1;
};

}  // namespace loom::testing
