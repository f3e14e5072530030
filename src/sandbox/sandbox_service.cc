#include "sandbox/sandbox_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "loom/sandbox/scaffold.h"
#include "loom/sandbox/tools.h"
#include "loom/sandbox/verify.h"

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
  return grpc::Status::OK;
}

grpc::Status SandboxService::Session(grpc::ServerContext* context, Stream* stream) {
  if (grpc::Status auth = CheckAuth(*context); !auth.ok()) return auth;
  // Without a deadline a vanished client could hold a sandbox forever.
  if (context->deadline() == std::chrono::system_clock::time_point::max()) {
    return Invalid("a Session call needs a deadline");
  }
  Watchdog::Watch watch(watchdog_, context);
  v1::ClientMessage first;
  if (!stream->Read(&first)) return grpc::Status::OK;  // client left before opening
  watch.Working();
  if (!first.has_open()) return Invalid("the first message of a session must be `open`");
  // A slot is taken only now: a stream that never opens holds none.
  SlotLease lease(admission_);
  if (lease.slot() < 0) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("worker ", name_, " is at capacity"));
  }
  const std::string id = absl::StrCat("s", next_session_++);
  auto sandbox = Sandbox::Create(config_, lease.slot(), id, first.open().environment());
  if (!sandbox.ok()) return ToGrpc(sandbox.status());
  v1::WorkerMessage opened;
  opened.mutable_opened()->set_session_id(id);
  opened.mutable_opened()->set_worker(name_);
  const v1::Environment& env = first.open().environment();
  if (!env.setup_command().empty()) {
    v1::ToolCall setup;
    setup.set_name("setup");
    double timeout =
        std::min(env.setup_timeout_s() > 0 ? env.setup_timeout_s() : kDefaultSetupTimeoutS,
                 limits_.max_command_s);
    auto run = (*sandbox)->Bash(env.setup_command(), timeout);
    if (!run.ok()) return ToGrpc(run.status());
    v1::ToolResult* result = opened.mutable_opened()->mutable_setup();
    result->set_name("setup");
    result->set_exit_code(run->exit_code);
    result->set_stdout(run->stdout_text);
    result->set_stderr(run->stderr_text);
    result->set_timed_out(run->timed_out);
    result->set_duration_ms(run->duration_ms);
  }
  if (!stream->Write(opened)) return grpc::Status::OK;
  spdlog::debug("session {} opened ({})", id, first.open().label());
  grpc::Status status = Serve(stream, **sandbox, id, watch);
  if (const std::string why = watch.cancelled(); !why.empty()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, why);
  }
  return status;
}

grpc::Status SandboxService::Serve(Stream* stream, const Sandbox& sandbox, const std::string& id,
                                   Watchdog::Watch& watch) {
  v1::ClientMessage message;
  for (watch.Waiting(); stream->Read(&message); watch.Waiting()) {
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
        grpc::Status status = RunEpisode(stream, sandbox, message.run_episode(), watch);
        if (!status.ok()) return status;
        break;
      }
      case v1::ClientMessage::kOpen:
        return Invalid("`open` may only be the first message of a session");
      case v1::ClientMessage::kGenerated:
        return Invalid("`generated` sent while no episode is asking for a turn");
      default:
        return Invalid("empty client message");
    }
  }
  return grpc::Status::OK;
}

grpc::Status SandboxService::RunEpisode(Stream* stream, const Sandbox& sandbox,
                                        const v1::RunEpisode& request, Watchdog::Watch& watch) {
  if (absl::Status s = ValidateVerification(request.task().verification()); !s.ok()) {
    return ToGrpc(s);
  }
  // The client's limits, within the worker's.
  v1::RunEpisode episode = request;
  v1::ScaffoldOptions& options = *episode.mutable_options();
  options = WithDefaults(options);
  options.set_tool_timeout_s(static_cast<int32_t>(
      std::min<double>(options.tool_timeout_s(), std::max(1.0, limits_.max_command_s))));
  options.set_max_time_s(static_cast<int32_t>(
      std::min<double>(options.max_time_s(), std::max(1.0, limits_.max_session_s))));
  grpc::Status protocol_error = grpc::Status::OK;
  GenerateFn generate =
      [&](const v1::GenerateRequest& request) -> absl::StatusOr<v1::GenerateReply> {
    v1::WorkerMessage ask;
    *ask.mutable_generate() = request;
    v1::ClientMessage answer;
    watch.Waiting();
    const bool answered = stream->Write(ask) && stream->Read(&answer);
    watch.Working();
    if (!answered) return absl::UnavailableError("the client closed the session");
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
  done.mutable_episode_done()->set_worker(name_);
  if (!protocol_error.ok()) return protocol_error;
  stream->Write(done);
  return grpc::Status::OK;
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
