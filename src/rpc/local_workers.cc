#include "loom/rpc/local_workers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loom/config/files.h"

namespace loom::rpc {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

std::string SelfExe() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).string();
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int null = open("/dev/null", O_RDONLY);
  if (log >= 0) {
    dup2(log, 1);
    dup2(log, 2);
  }
  if (null >= 0) dup2(null, 0);
  execv(argv[0], argv.data());
  _exit(127);
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
    pid_t pid = Spawn(args, absl::StrCat(tmpl, "/w", i, ".log"));
    if (pid < 0) return absl::ResourceExhaustedError("fork failed starting a local worker");
    workers->pids_.push_back(pid);
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
      int status = 0;
      if (waitpid(workers->pids_[i], &status, WNOHANG) == workers->pids_[i]) {
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
  kill(pids_[i], SIGKILL);
  waitpid(pids_[i], nullptr, 0);  // reap it: a zombie would still look alive
  pids_[i] = -1;
}

void LocalWorkers::StopAll() {
  for (pid_t pid : pids_) {
    if (pid > 0) kill(pid, SIGTERM);
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  for (pid_t& pid : pids_) {
    while (pid > 0) {
      if (waitpid(pid, nullptr, WNOHANG) == pid) {
        pid = -1;
      } else if (Clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
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
