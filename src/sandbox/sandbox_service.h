#pragma once
// The loom.v1.SandboxWorker implementation behind WorkerServer. Each Session
// call runs on its own gRPC thread and owns its Sandbox for the whole stream.

#include <atomic>
#include <string>

#include "loom/sandbox/sandbox.h"
#include "loom/sandbox/worker_server.h"
#include "loom/v1/sandbox.grpc.pb.h"
#include "sandbox/admission.h"
#include "sandbox/leases.h"
#include "sandbox/watchdog.h"

namespace loom::sandbox {

class SandboxService final : public v1::SandboxWorker::Service {
 public:
  SandboxService(SandboxConfig config, int capacity, std::string auth_token, std::string name,
                 SessionLimits limits = SessionLimits())
      : config_(std::move(config)),
        admission_(capacity),
        auth_token_(std::move(auth_token)),
        name_(std::move(name)),
        limits_(limits),
        watchdog_(limits.idle_timeout_s, limits.max_session_s) {}

  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::WorkerMessage, v1::ClientMessage>* stream) override;
  grpc::Status Status(grpc::ServerContext* context, const v1::StatusRequest* request,
                      v1::StatusReply* reply) override;
  grpc::Status Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                       v1::ReleaseReply* reply) override;

  void set_name(std::string name) { name_ = std::move(name); }
  // Ends the waits of detached episodes (the worker is stopping).
  void StopLeases() { leases_.Shutdown(); }

 private:
  using Stream = grpc::ServerReaderWriter<v1::WorkerMessage, v1::ClientMessage>;
  grpc::Status CheckAuth(const grpc::ServerContext& context) const;
  grpc::Status Serve(const ClientLink& link, const Sandbox& sandbox, const std::string& id,
                     double lease_s);
  grpc::Status RunEpisode(const ClientLink& link, const Sandbox& sandbox,
                          const v1::RunEpisode& episode, const std::string& id, double lease_s);
  // INVALID_ARGUMENT for a snapshot the scaffold cannot go on from.
  grpc::Status CheckResume(const v1::EpisodeSnapshot& resume,
                           const v1::ScaffoldOptions& options) const;
  // The episode as it waits for `pending`: its workspace (capped by the
  // request and the worker), record so far and the request.
  v1::EpisodeSnapshot Snapshot(const Sandbox& sandbox, const v1::Trajectory& so_far,
                               const v1::GenerateRequest& pending,
                               const v1::SnapshotRequest& request, const std::string& id);
  v1::ToolResult Execute(const Sandbox& sandbox, const v1::ToolCall& call, double timeout_s,
                         const std::string& id);

  const SandboxConfig config_;
  Admission admission_;
  const std::string auth_token_;
  std::string name_;  // "host:port", set once serving
  const SessionLimits limits_;
  Watchdog watchdog_;
  Leases leases_;
  std::atomic<int64_t> next_session_{0};
  std::atomic<int> episodes_running_{0};
  std::atomic<int64_t> repercussions_{0};  // episodes that broke their environment
  std::atomic<int> unopened_{0};           // streams waiting for their first message
};

}  // namespace loom::sandbox
