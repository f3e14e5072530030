#include "loom/rpc/session.h"

#include <grpcpp/grpcpp.h>

#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "loom/rpc/channel.h"
#include "loom/serve/relay.h"

namespace loom::rpc {

std::unique_ptr<WorkerSession> WorkerSession::Start(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& auth_token,
    std::chrono::system_clock::time_point deadline) {
  std::unique_ptr<WorkerSession> session(new WorkerSession());
  session->stub_ = v1::SandboxWorker::NewStub(channel);
  PrepareContext(session->context_, auth_token, deadline);
  session->stream_ = session->stub_->Session(&session->context_);
  return session;
}

absl::StatusOr<std::unique_ptr<WorkerSession>> WorkerSession::Open(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& auth_token,
    const v1::OpenSession& open, std::chrono::system_clock::time_point deadline) {
  std::unique_ptr<WorkerSession> session = Start(channel, auth_token, deadline);
  v1::ClientMessage first;
  *first.mutable_open() = open;
  v1::WorkerMessage reply;
  if (absl::Status s = session->Greet(first, v1::WorkerMessage::kOpened, &reply); !s.ok()) {
    return s;
  }
  session->opened_ = reply.opened();
  return session;
}

absl::StatusOr<std::unique_ptr<WorkerSession>> WorkerSession::Attach(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& auth_token,
    const std::string& session_id, std::chrono::system_clock::time_point deadline) {
  std::unique_ptr<WorkerSession> session = Start(channel, auth_token, deadline);
  v1::ClientMessage first;
  first.mutable_attach()->set_session_id(session_id);
  v1::WorkerMessage reply;
  if (absl::Status s = session->Greet(first, v1::WorkerMessage::kAttached, &reply); !s.ok()) {
    return s;
  }
  session->opened_.set_session_id(reply.attached().session_id());
  session->opened_.set_worker(reply.attached().worker());
  return session;
}

absl::Status WorkerSession::Greet(const v1::ClientMessage& first, v1::WorkerMessage::KindCase want,
                                  v1::WorkerMessage* reply) {
  if (absl::Status s = Write(first); !s.ok()) return s;
  if (absl::Status s = Read(reply); !s.ok()) return s;
  if (reply->kind_case() != want) {
    context_.TryCancel();
    return absl::InternalError(absl::StrCat(
        "worker answered `", first.has_open() ? "open" : "attach", "` with something else"));
  }
  return absl::OkStatus();
}

WorkerSession::~WorkerSession() {
  if (!finished_) {
    context_.TryCancel();
    Finish().IgnoreError();
  }
}

absl::Status WorkerSession::Finish() {
  if (!finished_) {
    finished_ = true;
    final_status_ = FromGrpc(stream_->Finish(), "sandbox session");
  }
  return final_status_;
}

absl::Status WorkerSession::Read(v1::WorkerMessage* message) {
  if (finished_ || !stream_->Read(message)) {
    absl::Status status = Finish();
    return status.ok() ? absl::UnavailableError("the worker ended the session") : status;
  }
  return absl::OkStatus();
}

absl::Status WorkerSession::Write(const v1::ClientMessage& message) {
  if (finished_ || !stream_->Write(message)) {
    // The real reason is in the status the worker sent.
    absl::Status status = Finish();
    return status.ok() ? absl::UnavailableError("the worker ended the session") : status;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ToolResult> WorkerSession::Call(const v1::ToolCall& call) {
  v1::ClientMessage message;
  *message.mutable_tool_call() = call;
  if (absl::Status s = Write(message); !s.ok()) return s;
  v1::WorkerMessage reply;
  if (absl::Status s = Read(&reply); !s.ok()) return s;
  if (!reply.has_tool_result()) return absl::InternalError("expected a tool result");
  return reply.tool_result();
}

absl::StatusOr<v1::Trajectory> WorkerSession::RunEpisode(const v1::RunEpisode& episode,
                                                         const Policy& policy) {
  v1::ClientMessage message;
  *message.mutable_run_episode() = episode;
  if (absl::Status s = Write(message); !s.ok()) return s;
  return Continue(policy);
}

absl::StatusOr<v1::Trajectory> WorkerSession::Continue(const Policy& policy) {
  while (true) {
    v1::WorkerMessage reply;
    if (absl::Status s = Read(&reply); !s.ok()) return s;
    if (reply.has_episode_done()) return reply.episode_done();
    if (!reply.has_generate()) return absl::InternalError("unexpected message during an episode");
    absl::StatusOr<v1::GenerateReply> turn = policy(reply.generate());
    if (!turn.ok()) {
      context_.TryCancel();
      Finish().IgnoreError();
      return turn.status();
    }
    v1::ClientMessage answer;
    *answer.mutable_generated() = *turn;
    answer.mutable_generated()->set_turn(reply.generate().turn());
    if (absl::Status s = Write(answer); !s.ok()) return s;
  }
}

absl::StatusOr<v1::HarnessDone> WorkerSession::RunHarness(const v1::RunHarness& run,
                                                          const serve::HttpHandler& handler) {
  v1::ClientMessage message;
  *message.mutable_run_harness() = run;
  if (absl::Status s = Write(message); !s.ok()) return s;
  std::mutex mu;  // one writer at a time; guards hung_up and broken
  std::set<int64_t> hung_up;
  bool broken = false;  // the run ended
  std::vector<std::thread> calls;
  auto serve_call = [&](const v1::HttpCall& call) {
    serve::AnswerResponder out(
        call.id(),
        [&](const v1::HttpAnswer& answer) {
          v1::ClientMessage part;
          *part.mutable_http_answer() = answer;
          std::lock_guard<std::mutex> lock(mu);
          return stream_->Write(part);
        },
        [&, id = call.id()] {
          std::lock_guard<std::mutex> lock(mu);
          return broken || hung_up.count(id) > 0;
        });
    handler(serve::RequestOf(call), out);
    if (!out.answered()) out.Send(500, "text/plain", "the endpoint wrote no answer\n");
  };
  absl::StatusOr<v1::HarnessDone> done = absl::UnknownError("not read");
  while (true) {
    v1::WorkerMessage reply;
    if (absl::Status s = Read(&reply); !s.ok()) {
      done = s;
      break;
    }
    if (reply.has_harness_done()) {
      done = std::move(*reply.mutable_harness_done());
      break;
    }
    if (reply.has_http_hangup()) {
      std::lock_guard<std::mutex> lock(mu);
      hung_up.insert(reply.http_hangup().id());
    } else if (reply.has_http_call()) {
      calls.emplace_back(serve_call, std::move(*reply.mutable_http_call()));
    } else {
      done = absl::InternalError("unexpected message during a harness run");
      context_.TryCancel();
      break;
    }
  }
  {  // the harness has ended, or the stream has: nobody reads answers any more
    std::lock_guard<std::mutex> lock(mu);
    broken = true;
  }
  for (std::thread& call : calls) call.join();
  return done;
}

absl::StatusOr<v1::EpisodeSnapshot> WorkerSession::Snapshot(int64_t max_bytes) {
  v1::ClientMessage message;
  message.mutable_snapshot()->set_max_bytes(max_bytes);
  if (absl::Status s = Write(message); !s.ok()) return s;
  v1::WorkerMessage reply;
  if (absl::Status s = Read(&reply); !s.ok()) return s;
  if (!reply.has_snapshot()) return absl::InternalError("expected a snapshot");
  if (!reply.snapshot().error().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", opened_.worker(), " took no snapshot: ", reply.snapshot().error()));
  }
  return std::move(*reply.mutable_snapshot());
}

absl::Status WorkerSession::Close() {
  if (finished_) return final_status_;
  stream_->WritesDone();
  return Finish();
}

}  // namespace loom::rpc
