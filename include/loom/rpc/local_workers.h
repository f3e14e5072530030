#pragma once
// LocalWorkers: `loom worker` processes on 127.0.0.1 that the trainer starts
// itself (config `sandbox.local: N`) and stops on exit. Each listens on an
// ephemeral port it writes to a port file; Start() waits (with a deadline)
// until every one is listening. The workers get SIGTERM if this process
// dies, and SIGTERM then SIGKILL when the LocalWorkers is destroyed.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::rpc {

struct LocalWorkerOptions {
  std::string binary;  // the loom binary; "" = this executable
  int count = 1;
  int max_sandboxes = 8;  // per worker
  std::string auth_token_file;
  std::vector<std::string> extra_args;  // appended to `loom worker ...`
  double startup_timeout_s = 60;        // loading LibTorch on a busy machine takes seconds
};

class LocalWorkers {
 public:
  static absl::StatusOr<std::unique_ptr<LocalWorkers>> Start(const LocalWorkerOptions& options);
  ~LocalWorkers();

  const std::vector<std::string>& targets() const { return targets_; }  // "127.0.0.1:PORT"
  pid_t pid(int i) const { return pids_[i]; }
  // Kills worker i with SIGKILL and reaps it (tests of worker loss);
  // pid(i) is -1 afterwards.
  void Kill(int i);

 private:
  LocalWorkers() = default;
  void StopAll();

  std::string dir_;  // port files and logs
  std::vector<pid_t> pids_;
  std::vector<std::string> targets_;
};

}  // namespace loom::rpc
