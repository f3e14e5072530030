#pragma once
// WorkerSession: the client end of one Session stream, i.e. one sandbox on
// one worker. Open() sends the environment and waits for the worker's
// `opened`; Call() runs one tool call; RunEpisode() hands the worker a task
// and answers its generation requests with `policy` until the trajectory
// comes back. Attach() takes over a leased session whose episode waits for
// a client (its earlier one went away); Continue() then drives that episode
// like RunEpisode. The whole session shares one deadline, so nothing waits
// forever. One thread uses a session at a time; destroying it closes it.
//
// Errors carry the worker's canonical code: RESOURCE_EXHAUSTED (worker at
// capacity: try another), UNAVAILABLE (worker down or lost), UNAUTHENTICATED,
// INVALID_ARGUMENT, DEADLINE_EXCEEDED.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "loom/serve/http.h"
#include "loom/v1/sandbox.grpc.pb.h"

namespace loom::rpc {

// The trainer's side of generation: given the messages to append, return
// the next assistant turn (or a parse error, or stop). A non-OK status
// aborts the episode.
using Policy = std::function<absl::StatusOr<v1::GenerateReply>(const v1::GenerateRequest&)>;

class WorkerSession {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerSession>> Open(
      const std::shared_ptr<grpc::Channel>& channel, const std::string& auth_token,
      const v1::OpenSession& open, std::chrono::system_clock::time_point deadline);
  // NOT_FOUND when the worker has no episode of `session_id` waiting.
  static absl::StatusOr<std::unique_ptr<WorkerSession>> Attach(
      const std::shared_ptr<grpc::Channel>& channel, const std::string& auth_token,
      const std::string& session_id, std::chrono::system_clock::time_point deadline);
  ~WorkerSession();

  const v1::Opened& opened() const { return opened_; }
  // The pool's name for the worker (its configured target), when set.
  const std::string& target() const { return target_; }
  void set_target(std::string target) { target_ = std::move(target); }
  absl::StatusOr<v1::ToolResult> Call(const v1::ToolCall& call);
  absl::StatusOr<v1::Trajectory> RunEpisode(const v1::RunEpisode& episode, const Policy& policy);
  // Runs an agent harness in the sandbox (see v1::RunHarness) and serves its
  // model endpoint with `handler` (e.g. serve::Endpoint::HandleSession), each
  // request on a thread of its own, until the harness's process ends. A
  // request whose harness hangs up sees its responder's ClientGone().
  absl::StatusOr<v1::HarnessDone> RunHarness(const v1::RunHarness& run,
                                             const serve::HttpHandler& handler);
  // After Attach: answers the episode's requests (first whatever the worker
  // sends again) until its trajectory comes.
  absl::StatusOr<v1::Trajectory> Continue(const Policy& policy);
  // Only from inside the policy, while the episode waits for a turn: the
  // episode's snapshot (see v1::EpisodeSnapshot), its workspace archive at
  // most `max_bytes`. FAILED_PRECONDITION with the worker's reason when it
  // took none.
  absl::StatusOr<v1::EpisodeSnapshot> Snapshot(int64_t max_bytes);
  // Ends the stream and returns the worker's final status.
  absl::Status Close();
  // Breaks the stream from any thread: a call waiting on the worker returns
  // CANCELLED at once.
  void Cancel() { context_.TryCancel(); }

 private:
  WorkerSession() = default;
  static std::unique_ptr<WorkerSession> Start(const std::shared_ptr<grpc::Channel>& channel,
                                              const std::string& auth_token,
                                              std::chrono::system_clock::time_point deadline);
  // Sends a stream's first message (`open` or `attach`) and reads the
  // worker's answer, which must be of kind `want`.
  absl::Status Greet(const v1::ClientMessage& first, v1::WorkerMessage::KindCase want,
                     v1::WorkerMessage* reply);
  // Reads the next message; on a broken stream returns the stream's status.
  absl::Status Read(v1::WorkerMessage* message);
  absl::Status Write(const v1::ClientMessage& message);
  absl::Status Finish();

  std::unique_ptr<v1::SandboxWorker::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::WorkerMessage>> stream_;
  v1::Opened opened_;  // after Open; after Attach, the session id and worker
  std::string target_;
  bool finished_ = false;
  absl::Status final_status_;
};

}  // namespace loom::rpc
