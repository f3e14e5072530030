#pragma once
// Child processes: the one fork/exec/wait path for everything loom runs as a
// separate program (the ranks of `loom launch`, local sandbox workers, a
// teacher's own training run, gnuplot, bench runs). Everything the child
// needs is built before fork, so the child only calls async-signal-safe
// functions, which is what a multithreaded parent requires.

#include <sys/types.h>

#include <csignal>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] names the program to the child
  std::string program;            // the file to exec; "" means argv[0] (a path: no PATH search)
  std::string output;             // the child's stdout and stderr; "" keeps the parent's
  bool append_output = false;     // append to `output` rather than truncate it
  bool null_stdin = false;        // read stdin from /dev/null
  std::vector<std::pair<std::string, std::string>> set_env;  // on top of the parent's
  std::vector<std::string> unset_env;
  bool die_with_parent = false;           // SIGTERM to the child when the parent dies
  const sigset_t* signal_mask = nullptr;  // the child's signal mask; null keeps the parent's
};

// Starts the child. Fails, with nothing left running, when `output` cannot be
// opened, fork fails, or the program cannot be executed (it names which).
absl::StatusOr<pid_t> StartChild(const ChildOptions& options);

// A wait status as one number: the exit code, or 128 + the killing signal.
int ExitCode(int wait_status);

// Waits for the child to end and reaps it; its ExitCode.
absl::StatusOr<int> WaitChild(pid_t pid);

// Reaps the child if it has ended: its ExitCode, or nullopt while it runs.
absl::StatusOr<std::optional<int>> PollChild(pid_t pid);

// SIGKILL and reap: a zombie would still look alive to kill(pid, 0).
void KillChild(pid_t pid);

}  // namespace loom
