#pragma once
// WorkerServer: the gRPC service of `loom worker` (loom.v1.SandboxWorker).
// Each Session stream owns one Sandbox; admission control keeps at most
// `max_sandboxes` alive and refuses more at once with RESOURCE_EXHAUSTED.
// With an auth token, calls without `authorization: Bearer <token>` metadata
// get UNAUTHENTICATED (compared in constant time); malformed requests get
// INVALID_ARGUMENT. Without a token the worker listens on loopback only,
// unless `allow_unauthenticated` says otherwise (and then it warns).
// A session takes a slot at `open`, not before; the watchdog cancels
// sessions whose client goes quiet or that outlive `max_session_s`. A session
// opened with a lease keeps its episode (and its slot) for that long after
// its client went away, for a client that attaches to it.
// Sandboxes live under `<sandbox_root>/w<pid>/` (cleaned when the worker
// stops, and leftovers of dead workers removed at start) and die with the
// worker. The sandbox root must be a directory the worker owns that no one
// else can write (not a link); the default is $TMPDIR/loom-sandboxes-<uid>,
// created mode 0711.
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

// What a client may ask of the worker's time, whatever it sends.
struct SessionLimits {
  double idle_timeout_s = 600;  // no message from the client for this long: cancelled
  double max_session_s = 3600;  // any session, whatever its deadline
  double max_command_s = 600;   // caps every timeout a client sets (setup, tools, episodes)
  double max_lease_s = 600;  // caps the lease a client asks for (0: no session outlives its client)
  int max_snapshot_mb = 32;  // caps an episode snapshot's workspace archive (0: no snapshots)
  // A stream must send `open` or `attach` within this, and at most
  // `max_unopened` may wait at once (each holds a thread); more are refused.
  double open_timeout_s = 30;
  int max_unopened = 64;
};

class SandboxService;

struct WorkerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  int max_sandboxes = 4;
  std::string auth_token;    // "" = no authentication
  std::string tls_cert_pem;  // both set: serve TLS
  std::string tls_key_pem;
  std::string sandbox_root;  // "" = $TMPDIR (or /tmp) + /loom-sandboxes-<uid>
  SandboxConfig sandbox;     // limits; `root` is filled in by Start()
  SessionLimits sessions;
  bool allow_unauthenticated = false;  // listen beyond loopback without a token
};

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
