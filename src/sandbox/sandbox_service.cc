#include "sandbox/sandbox_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "loom/sandbox/scaffold.h"
#include "loom/sandbox/tools.h"
#include "loom/sandbox/verify.h"
#include "loom/tasks/conversation.h"
#include "sandbox/harness_run.h"

namespace loom::sandbox {
namespace {

constexpr double kDefaultSetupTimeoutS = 120;

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// Compares in time that depends only on the lengths, so that timing does not
// reveal how much of a guessed token was right.
bool SameSecret(absl::string_view given, absl::string_view expected) {
  if (expected.empty()) return false;
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  }
  return diff == 0;
}

// "s<n>-<16 hex digits>": a session id no other client can guess, since
// whoever names a leased session takes its episode over.
std::string NewSessionId(int64_t n) {
  std::random_device entropy;
  const uint64_t salt = (static_cast<uint64_t>(entropy()) << 32) | entropy();
  return absl::StrCat("s", n, "-", absl::Hex(salt, absl::kZeroPad16));
}

// An episode's side of its client: the stream it began on or, in a leased
// session, the latest stream that attached to it.
class EpisodeClient {
 public:
  EpisodeClient(Leases& leases, ClientLink link, std::string id, double lease_s)
      : leases_(leases), link_(link), id_(std::move(id)), lease_s_(lease_s) {
    if (lease_s_ > 0) leases_.Register(id_, link.context);
  }
  ~EpisodeClient() {
    Release(grpc::Status::OK);
    if (lease_s_ > 0) leases_.Unregister(id_);
  }

  // Sends `message` and, with `reply`, reads the client's answer. When the
  // client goes away, a leased session waits for a client to attach and
  // sends again on its stream (`after_attach` instead, when given: what a
  // new client is owed). Without `reply`, a leased session waits for the
  // client to close its side, so a message it never read is sent again.
  // False when no client is left, or when a client that is still there
  // sent no readable answer (broken()).
  bool Exchange(const v1::WorkerMessage& message, v1::ClientMessage* reply,
                const v1::WorkerMessage* after_attach = nullptr) {
    const v1::WorkerMessage* next = &message;
    while (!gone_) {
      if (lease_s_ > 0 && SwitchTo(leases_.TakeAttached(id_)) && after_attach != nullptr) {
        next = after_attach;
      }
      link_.watch->Waiting();
      bool ok = link_.stream->Write(*next);
      if (ok && reply != nullptr) {
        ok = link_.stream->Read(reply);
      } else if (ok && lease_s_ > 0) {
        v1::ClientMessage ignored;
        while (link_.stream->Read(&ignored)) {
        }
        ok = !link_.context->IsCancelled();
      }
      link_.watch->Working();
      if (ok) return true;
      // The client did not go away, yet no answer came: its message does not
      // parse, or it closed its side without one. Nobody would attach.
      broken_ = reply != nullptr && !link_.context->IsCancelled();
      if (lease_s_ <= 0 || broken_) break;
      spdlog::info("session {}: the client left mid-episode; kept for {} s", id_, lease_s_);
      std::shared_ptr<Leases::Handover> attached = leases_.Await(id_, lease_s_);
      if (attached == nullptr) {
        spdlog::info("session {}: no client came back; the episode ends", id_);
        break;
      }
      SwitchTo(std::move(attached));
      if (after_attach != nullptr) next = after_attach;
    }
    gone_ = true;
    return false;
  }

  bool broken() const { return broken_; }

  // The attached stream, if any, goes back to its handler with `status`.
  void Release(grpc::Status status) {
    if (handover_ != nullptr) handover_->Release(std::move(status));
    handover_.reset();
  }

 private:
  // Whether a client attached (`next` is not null).
  bool SwitchTo(std::shared_ptr<Leases::Handover> next) {
    if (next == nullptr) return false;
    Release(grpc::Status(grpc::StatusCode::CANCELLED, "another client attached"));
    spdlog::info("session {}: a client attached", id_);
    handover_ = std::move(next);
    link_ = handover_->link();
    return true;
  }

  Leases& leases_;
  ClientLink link_;
  const std::string id_;
  const double lease_s_;
  std::shared_ptr<Leases::Handover> handover_;
  bool gone_ = false;
  bool broken_ = false;
};

// Counts a stream as waiting for its first message while it lives.
class UnopenedStream {
 public:
  explicit UnopenedStream(std::atomic<int>& count) : count_(count), now_(++count) {}
  ~UnopenedStream() { --count_; }
  int count() const { return now_; }  // this one included

 private:
  std::atomic<int>& count_;
  const int now_;
};

}  // namespace

grpc::Status SandboxService::CheckAuth(const grpc::ServerContext& context) const {
  if (auth_token_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end() || !SameSecret(absl::string_view(it->second.data(), it->second.size()),
                                          "Bearer " + auth_token_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong auth token");
  }
  return grpc::Status::OK;
}

grpc::Status SandboxService::Status(grpc::ServerContext* context, const v1::StatusRequest*,
                                    v1::StatusReply* reply) {
  if (grpc::Status auth = CheckAuth(*context); !auth.ok()) return auth;
  Admission::Load load = admission_.Snapshot();
  reply->set_live_sandboxes(load.live);
  reply->set_capacity(load.capacity);
  reply->set_p50_ms(load.p50_ms);
  reply->set_p99_ms(load.p99_ms);
  reply->set_sessions_served(load.served);
  reply->set_refused(load.refused);
  reply->set_worker(name_);
  reply->set_episodes_running(episodes_running_.load());
  reply->set_repercussions(repercussions_.load());
  reply->set_detached(leases_.detached());
  reply->set_leases_lapsed(leases_.lapsed());
  reply->set_limits(KernelLimits(config_));
  return grpc::Status::OK;
}

grpc::Status SandboxService::Release(grpc::ServerContext* context,
                                     const v1::ReleaseRequest* request, v1::ReleaseReply* reply) {
  if (grpc::Status auth = CheckAuth(*context); !auth.ok()) return auth;
  int released = 0;
  for (const std::string& id : request->session_ids()) released += leases_.Release(id);
  reply->set_released(released);
  return grpc::Status::OK;
}

grpc::Status SandboxService::Session(grpc::ServerContext* context, Stream* stream) {
  if (grpc::Status auth = CheckAuth(*context); !auth.ok()) return auth;
  // Without a deadline a vanished client could hold a sandbox forever.
  if (context->deadline() == std::chrono::system_clock::time_point::max()) {
    return Invalid("a Session call needs a deadline");
  }
  v1::ClientMessage first;
  Watchdog::Watch watch(watchdog_, context, limits_.open_timeout_s);
  {
    UnopenedStream unopened(unopened_);
    if (unopened.count() > limits_.max_unopened) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("worker ", name_, " has ", limits_.max_unopened,
                                       " streams waiting for their first message already"));
    }
    if (!stream->Read(&first)) {
      if (context->IsCancelled()) return grpc::Status::OK;  // the client left, or was cut off
      return Invalid(
          "the stream's first message does not parse as a ClientMessage, or none was sent");
    }
  }
  watch.Working();
  if (first.has_attach()) {
    const std::string& id = first.attach().session_id();
    return leases_.Attach(id, name_, {stream, context, &watch}, [&] {
      v1::WorkerMessage attached;
      attached.mutable_attached()->set_session_id(id);
      attached.mutable_attached()->set_worker(name_);
      return stream->Write(attached);
    });
  }
  if (!first.has_open()) {
    return Invalid("the first message of a session must be `open` or `attach`");
  }
  // A slot is taken only now: a stream that never opens holds none.
  SlotLease lease(admission_);
  if (lease.slot() < 0) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("worker ", name_, " is at capacity"));
  }
  const std::string id = NewSessionId(next_session_++);
  const double lease_s = std::clamp(first.open().lease_s(), 0.0, limits_.max_lease_s);
  auto sandbox = Sandbox::Create(config_, lease.slot(), id, first.open().environment());
  if (!sandbox.ok()) return ToGrpc(sandbox.status());
  v1::WorkerMessage opened;
  opened.mutable_opened()->set_session_id(id);
  opened.mutable_opened()->set_worker(name_);
  opened.mutable_opened()->set_lease_s(lease_s);
  const v1::Environment& env = first.open().environment();
  if (!env.setup_command().empty()) {
    v1::ToolCall setup;
    setup.set_name("setup");
    double timeout =
        std::min(env.setup_timeout_s() > 0 ? env.setup_timeout_s() : kDefaultSetupTimeoutS,
                 limits_.max_command_s);
    auto run = (*sandbox)->Bash(env.setup_command(), timeout);
    if (!run.ok()) return ToGrpc(run.status());
    *opened.mutable_opened()->mutable_setup() = ToolResultOf(setup, run);
  }
  if (!stream->Write(opened)) return grpc::Status::OK;
  spdlog::debug("session {} opened ({})", id, first.open().label());
  grpc::Status status = Serve({stream, context, &watch}, **sandbox, id, lease_s);
  if (const std::string why = watch.cancelled(); !why.empty()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, why);
  }
  return status;
}

grpc::Status SandboxService::Serve(const ClientLink& link, const Sandbox& sandbox,
                                   const std::string& id, double lease_s) {
  Stream* stream = link.stream;
  Watchdog::Watch& watch = *link.watch;
  v1::ClientMessage message;
  std::optional<v1::ClientMessage> next;  // read already, by a harness run's reader
  while (true) {
    if (next) {
      message = *std::move(next);
      next.reset();
    } else {
      watch.Waiting();
      if (!stream->Read(&message)) break;
    }
    watch.Working();
    switch (message.kind_case()) {
      case v1::ClientMessage::kToolCall: {
        v1::WorkerMessage reply;
        *reply.mutable_tool_result() =
            Execute(sandbox, message.tool_call(), limits_.max_command_s, id);
        if (!stream->Write(reply)) return grpc::Status::OK;
        break;
      }
      case v1::ClientMessage::kRunEpisode: {
        // After an episode a leased session has nothing more to serve: its
        // stream may be one that attached (and has closed) by now.
        grpc::Status status = RunEpisode(link, sandbox, message.run_episode(), id, lease_s);
        if (!status.ok() || lease_s > 0) return status;
        break;
      }
      case v1::ClientMessage::kRunHarness: {
        HarnessRunResult run =
            RunHarness(link, sandbox, message.run_harness(), limits_.max_session_s, id);
        if (!run.status.ok()) return ToGrpc(run.status);
        next = std::move(run.next);
        break;
      }
      case v1::ClientMessage::kHttpAnswer:
        return Invalid("`http_answer` sent while no harness is running");
      case v1::ClientMessage::kOpen:
      case v1::ClientMessage::kAttach:
        return Invalid("`open` and `attach` may only be the first message of a session");
      case v1::ClientMessage::kGenerated:
      case v1::ClientMessage::kSnapshot:
        return Invalid("`generated` or `snapshot` sent while no episode is asking for a turn");
      default:
        return Invalid("empty client message");
    }
  }
  return grpc::Status::OK;
}

grpc::Status SandboxService::RunEpisode(const ClientLink& link, const Sandbox& sandbox,
                                        const v1::RunEpisode& request, const std::string& id,
                                        double lease_s) {
  if (absl::Status s = ValidateVerification(request.task().verification()); !s.ok()) {
    return ToGrpc(s);
  }
  // The client's limits, within the worker's.
  v1::RunEpisode episode = request;
  v1::ScaffoldOptions& options = *episode.mutable_options();
  options = tasks::WithDefaults(options);
  options.set_tool_timeout_s(static_cast<int32_t>(
      std::min<double>(options.tool_timeout_s(), std::max(1.0, limits_.max_command_s))));
  options.set_max_time_s(static_cast<int32_t>(
      std::min<double>(options.max_time_s(), std::max(1.0, limits_.max_session_s))));
  if (episode.has_resume()) {
    if (grpc::Status s = CheckResume(episode.resume(), options); !s.ok()) return s;
  }
  EpisodeClient client(leases_, link, id, lease_s);
  grpc::Status protocol_error = grpc::Status::OK;
  GenerateFn generate = [&](const v1::GenerateRequest& request,
                            const v1::Trajectory& so_far) -> absl::StatusOr<v1::GenerateReply> {
    v1::WorkerMessage ask;
    *ask.mutable_generate() = request;
    v1::ClientMessage answer;
    bool ok = client.Exchange(ask, &answer);
    // The client may ask for snapshots of the episode as it waits here; a
    // client that attaches meanwhile is owed the request, not a snapshot.
    while (ok && answer.has_snapshot()) {
      v1::WorkerMessage snapshot;
      *snapshot.mutable_snapshot() = Snapshot(sandbox, so_far, request, answer.snapshot(), id);
      ok = client.Exchange(snapshot, &answer, &ask);
    }
    if (!ok && client.broken()) {
      protocol_error =
          Invalid(absl::StrCat("the answer to turn ", request.turn(),
                               " could not be read (a message that does not parse, or the client "
                               "closed its side without one)"));
      return absl::InvalidArgumentError(protocol_error.error_message());
    }
    if (!ok) return absl::UnavailableError("the client closed the session");
    if (!answer.has_generated() || answer.generated().turn() != request.turn()) {
      protocol_error = Invalid(absl::StrCat("expected `generated` for turn ", request.turn()));
      return absl::InvalidArgumentError(protocol_error.error_message());
    }
    return answer.generated();
  };
  v1::WorkerMessage done;
  ToolObserver record = [this](const v1::ToolResult& result) {
    admission_.RecordLatency(static_cast<double>(result.duration_ms()));
  };
  ++episodes_running_;  // until the verdict is known, before it is sent
  *done.mutable_episode_done() = RunScaffold(sandbox, episode, generate, record);
  --episodes_running_;
  if (!done.episode_done().repercussion().empty()) ++repercussions_;
  done.mutable_episode_done()->set_worker(name_);
  if (!protocol_error.ok()) {
    client.Release(protocol_error);
    return protocol_error;
  }
  client.Exchange(done, nullptr);
  return grpc::Status::OK;
}

grpc::Status SandboxService::CheckResume(const v1::EpisodeSnapshot& resume,
                                         const v1::ScaffoldOptions& options) const {
  if (!resume.error().empty()) {
    return Invalid(absl::StrCat("run_episode.resume: a snapshot that failed cannot be resumed (",
                                resume.error(), ")"));
  }
  const int turn = resume.pending().turn();
  if (turn < 0 || turn >= options.max_steps()) {
    return Invalid(absl::StrCat("run_episode.resume.pending.turn: ", turn, " is outside 0..",
                                options.max_steps() - 1, " (max_steps)"));
  }
  if (resume.trajectory().steps() != turn) {
    return Invalid(
        absl::StrCat("run_episode.resume.trajectory.steps: ", resume.trajectory().steps(),
                     " turns taken, but the pending turn is ", turn));
  }
  if (resume.pending().append().empty()) {
    return Invalid("run_episode.resume.pending.append: a pending request appends messages");
  }
  if (!resume.trajectory().failure_reason().empty() || resume.trajectory().has_verdict()) {
    return Invalid("run_episode.resume.trajectory: the snapshot's episode had already ended");
  }
  return grpc::Status::OK;
}

v1::EpisodeSnapshot SandboxService::Snapshot(const Sandbox& sandbox, const v1::Trajectory& so_far,
                                             const v1::GenerateRequest& pending,
                                             const v1::SnapshotRequest& request,
                                             const std::string& id) {
  v1::EpisodeSnapshot snapshot;
  const int64_t cap =
      std::min<int64_t>(request.max_bytes(), int64_t{limits_.max_snapshot_mb} << 20);
  if (cap <= 0) {
    snapshot.set_error(
        limits_.max_snapshot_mb <= 0
            ? absl::StrCat("worker ", name_, " takes no snapshots (--max-snapshot-mb 0)")
            : std::string("snapshot.max_bytes must be positive"));
    return snapshot;
  }
  absl::StatusOr<std::string> archive = sandbox.ArchiveWorkspace(cap, limits_.max_command_s);
  if (!archive.ok()) {
    snapshot.set_error(std::string(archive.status().message()));
    spdlog::warn("session {}: no snapshot: {}", id, snapshot.error());
    return snapshot;
  }
  snapshot.set_workspace(*std::move(archive));
  *snapshot.mutable_trajectory() = so_far;
  *snapshot.mutable_pending() = pending;
  spdlog::info("session {}: snapshot at turn {} ({} bytes of workspace)", id, pending.turn(),
               snapshot.workspace().size());
  return snapshot;
}

v1::ToolResult SandboxService::Execute(const Sandbox& sandbox, const v1::ToolCall& call,
                                       double timeout_s, const std::string& id) {
  v1::ToolResult result = ExecuteTool(sandbox, call, timeout_s);
  admission_.RecordLatency(static_cast<double>(result.duration_ms()));
  spdlog::info("session {} tool {} exit {} {}ms{}{}{}", id, call.name(), result.exit_code(),
               result.duration_ms(), result.timed_out() ? " timed-out" : "",
               result.truncated() ? " truncated" : "",
               result.limit().empty() ? "" : " killed: " + result.limit());
  return result;
}

}  // namespace loom::sandbox
