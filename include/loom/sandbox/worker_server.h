#pragma once
// WorkerServer: the gRPC service of `loom worker` (loom.v1.SandboxWorker).
// Each Session stream owns one Sandbox; admission control keeps at most
// `max_sandboxes` alive and refuses more at once with RESOURCE_EXHAUSTED.
// With an auth token, calls without `authorization: Bearer <token>` metadata
// get UNAUTHENTICATED; malformed requests get INVALID_ARGUMENT. Sandboxes
// live under `<sandbox_root>/w<pid>/` (cleaned when the worker stops, and
// leftovers of dead workers removed at start) and die with the worker.
//
// Start() returns a running server; Shutdown() may be called from any
// thread (e.g. a signal watcher) and cancels live sessions.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "loom/sandbox/sandbox.h"

namespace grpc {
class Server;
}

namespace loom::sandbox {

struct WorkerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  int max_sandboxes = 4;
  std::string auth_token;    // "" = no authentication
  std::string tls_cert_pem;  // both set: serve TLS
  std::string tls_key_pem;
  std::string sandbox_root;  // "" = $TMPDIR (or /tmp) + /loom-sandboxes
  SandboxConfig sandbox;     // limits; `root` is filled in by Start()
};

class SandboxService;

class WorkerServer {
 public:
  // Checks bubblewrap, cleans leftovers, binds, and starts serving.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerOptions& options);
  ~WorkerServer();

  int port() const { return port_; }
  const std::string& address() const { return address_; }
  void Wait();      // until Shutdown()
  void Shutdown();  // stops accepting and cancels sessions (2 s grace)
  // Deletes this worker's sandbox directory (for a fast exit after Shutdown).
  void RemoveSandboxDirectory();

 private:
  WorkerServer() = default;
  WorkerOptions options_;
  std::unique_ptr<SandboxService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  std::string sandbox_dir_;  // <sandbox_root>/w<pid>
};

}  // namespace loom::sandbox
