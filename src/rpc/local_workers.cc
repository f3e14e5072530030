#include "loom/rpc/local_workers.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loom/base/child_process.h"
#include "loom/config/files.h"

namespace loom::rpc {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

std::string SelfExe() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).string();
}

// A worker process: output to its log, no stdin, gone with this process.
absl::StatusOr<pid_t> Spawn(std::vector<std::string> args, const std::string& log_path) {
  ChildOptions child;
  child.argv = std::move(args);
  child.output = log_path;
  child.null_stdin = true;
  child.die_with_parent = true;
  return StartChild(child);
}

std::string LogTail(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return "";
  return text->size() > 2000 ? text->substr(text->size() - 2000) : *text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalWorkers>> LocalWorkers::Start(
    const LocalWorkerOptions& options) {
  std::unique_ptr<LocalWorkers> workers(new LocalWorkers());
  std::string tmpl = (fs::temp_directory_path() / "loom-local-workers-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  workers->dir_ = tmpl;
  const std::string binary = options.binary.empty() ? SelfExe() : options.binary;
  for (int i = 0; i < options.count; ++i) {
    std::vector<std::string> args = {binary,
                                     "worker",
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--max-sandboxes",
                                     absl::StrCat(options.max_sandboxes),
                                     "--port-file",
                                     absl::StrCat(tmpl, "/w", i, ".port")};
    if (!options.auth_token_file.empty()) {
      args.insert(args.end(), {"--auth-token-file", options.auth_token_file});
    }
    args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
    absl::StatusOr<pid_t> pid = Spawn(std::move(args), absl::StrCat(tmpl, "/w", i, ".log"));
    if (!pid.ok()) {
      return absl::UnavailableError(
          absl::StrCat("starting local worker ", i, ": ", pid.status().message()));
    }
    workers->pids_.push_back(*pid);
  }
  const Clock::time_point deadline =
      Clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(options.startup_timeout_s * 1000));
  for (int i = 0; i < options.count; ++i) {
    const std::string port_file = absl::StrCat(tmpl, "/w", i, ".port");
    while (true) {
      absl::StatusOr<std::string> port = ReadFile(port_file);
      if (port.ok() && !port->empty()) {
        workers->targets_.push_back(absl::StrCat("127.0.0.1:", absl::StripAsciiWhitespace(*port)));
        break;
      }
      absl::StatusOr<std::optional<int>> exited = PollChild(workers->pids_[i]);
      if (!exited.ok() || exited->has_value()) {
        workers->pids_[i] = -1;
        return absl::UnavailableError(absl::StrCat("local worker ", i, " exited at start: ",
                                                   LogTail(absl::StrCat(tmpl, "/w", i, ".log"))));
      }
      if (Clock::now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("local worker ", i, " did not start in ",
                                                        options.startup_timeout_s, " s"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return workers;
}

void LocalWorkers::Kill(int i) {
  if (pids_[i] <= 0) return;
  KillChild(pids_[i]);
  pids_[i] = -1;
}

void LocalWorkers::StopAll() {
  for (pid_t pid : pids_) {
    if (pid > 0) kill(pid, SIGTERM);
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  for (pid_t& pid : pids_) {
    while (pid > 0) {
      absl::StatusOr<std::optional<int>> exited = PollChild(pid);
      if (!exited.ok() || exited->has_value()) {
        pid = -1;
      } else if (Clock::now() > deadline) {
        KillChild(pid);
        pid = -1;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
}

LocalWorkers::~LocalWorkers() {
  StopAll();
  if (!dir_.empty()) RemoveTree(dir_).IgnoreError();
}

}  // namespace loom::rpc
