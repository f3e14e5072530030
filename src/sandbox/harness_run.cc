#include "sandbox/harness_run.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loom/base/env_name.h"
#include "loom/sandbox/verify.h"
#include "loom/serve/http.h"
#include "loom/serve/relay.h"

namespace loom::sandbox {
namespace {

constexpr int kDefaultPort = 8000;
constexpr size_t kMinKeyLength = 16;
// Under gRPC's default message size, with room for the call's head.
constexpr size_t kMaxRelayedBody = 3 << 20;
// The verification's checks after the harness, together.
constexpr double kVerifyTimeoutS = 300;

absl::Status CheckRun(const SandboxConfig& config, const v1::RunHarness& run) {
  if (absl::StripAsciiWhitespace(run.command()).empty()) {
    return absl::InvalidArgumentError("run_harness.command: empty");
  }
  if (run.api_key().size() < kMinKeyLength) {
    return absl::InvalidArgumentError(absl::StrCat("run_harness.api_key: needs at least ",
                                                   kMinKeyLength,
                                                   " characters (the session's secret)"));
  }
  if (run.port() < 0 || run.port() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("run_harness.port: ", run.port(), " is not a TCP port"));
  }
  if (run.timeout_s() < 0) return absl::InvalidArgumentError("run_harness.timeout_s: negative");
  for (const auto& [name, value] : run.env()) {
    if (!IsEnvName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("run_harness.env: '", name, "' is not a variable name"));
    }
  }
  if (absl::Status s = CheckFiles(config, run.files()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("run_harness.files: ", s.message()));
  }
  if (run.has_verification()) {
    if (absl::Status s = ValidateVerification(run.verification()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("run_harness.verification: ", s.message()));
    }
  }
  return absl::OkStatus();
}

// The relay between the harness's connections and the session's stream.
class Relay {
 public:
  explicit Relay(SessionStream& stream) : stream_(stream) {}

  // An HttpServer handler: one harness request, on its connection's thread.
  void Handle(const serve::HttpRequest& request, serve::HttpResponder& out) {
    const int64_t id = next_id_++;
    {
      std::lock_guard<std::mutex> lock(mu_);
      parts_[id];
    }
    v1::WorkerMessage call;
    *call.mutable_http_call() = serve::CallOf(id, request);
    // Until the answer's last part, the harness's hang-up or the stream's end.
    enum class End { kNone, kAnswered, kHungUp, kBroken } end = End::kNone;
    if (!Write(call)) end = End::kBroken;
    while (end == End::kNone) {
      std::deque<v1::HttpAnswer> parts;
      bool broken;
      {
        std::unique_lock<std::mutex> lock(mu_);
        changed_.wait_for(lock, std::chrono::milliseconds(50),
                          [&] { return broken_ || !parts_[id].empty(); });
        parts.swap(parts_[id]);
        broken = broken_;
      }
      for (const v1::HttpAnswer& part : parts) {
        if (!serve::Replay(part, out)) {
          end = End::kHungUp;
          break;
        }
        if (part.kind() == v1::HttpAnswer::WHOLE || part.kind() == v1::HttpAnswer::EVENTS_END) {
          end = End::kAnswered;
          break;
        }
      }
      if (end == End::kNone && broken) end = End::kBroken;
      if (end == End::kNone && out.ClientGone()) end = End::kHungUp;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      parts_.erase(id);
    }
    if (end == End::kHungUp) {  // the client stops generating what nobody reads
      v1::WorkerMessage hangup;
      hangup.mutable_http_hangup()->set_id(id);
      Write(hangup);
    }
  }

  // The reader: the client's answers to their calls, until a message that
  // is not one (kept as `next`) or the end of the stream.
  void Read() {
    v1::ClientMessage message;
    while (stream_.Read(&message)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (message.has_http_answer()) {
        auto it = parts_.find(message.http_answer().id());
        if (it != parts_.end()) it->second.push_back(message.http_answer());  // else: hung up
        changed_.notify_all();
        continue;
      }
      if (!harness_ended_) {
        protocol_error_ = "the client sent a message other than http_answer during run_harness";
      }
      next_ = std::move(message);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    changed_.notify_all();
  }

  // Why the harness must stop ("" = it need not).
  std::string StopReason() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!protocol_error_.empty()) return protocol_error_;
    return broken_ ? "the client went away" : "";
  }

  bool Write(const v1::WorkerMessage& message) {
    std::lock_guard<std::mutex> lock(write_mu_);
    return stream_.Write(message);
  }

  void HarnessEnded() {
    std::lock_guard<std::mutex> lock(mu_);
    harness_ended_ = true;
  }
  int64_t calls() const { return next_id_.load(); }
  std::string protocol_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return protocol_error_;
  }
  std::optional<v1::ClientMessage> TakeNext() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(next_);
  }

 private:
  SessionStream& stream_;
  std::atomic<int64_t> next_id_{0};
  std::mutex write_mu_;  // one writer at a time on the stream
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<int64_t, std::deque<v1::HttpAnswer>> parts_;  // open calls; guarded by mu_
  bool broken_ = false;                                  // guarded by mu_
  bool harness_ended_ = false;                           // guarded by mu_
  std::string protocol_error_;                           // guarded by mu_
  std::optional<v1::ClientMessage> next_;                // guarded by mu_
};

// Writes the harness's files under /tmp (its HOME), inside the sandbox.
std::string WriteFiles(const Sandbox& sandbox, const v1::RunHarness& run) {
  for (const auto& [path, text] : run.files()) {
    auto write = sandbox.Bash(R"sh(mkdir -p -- "$(dirname -- "/tmp/$1")" && cat > "/tmp/$1")sh", 30,
                              {path}, text);
    if (!write.ok()) return absl::StrCat("cannot write ", path, ": ", write.status().message());
    if (write->exit_code != 0) {
      return absl::StrCat("cannot write ", path, ": ",
                          absl::StripTrailingAsciiWhitespace(write->stderr_text));
    }
  }
  return "";
}

}  // namespace

HarnessRunResult RunHarness(const ClientLink& link, const Sandbox& sandbox,
                            const v1::RunHarness& run, double max_s, const std::string& id) {
  HarnessRunResult result;
  result.status = CheckRun(sandbox.config(), run);
  if (!result.status.ok()) return result;
  v1::WorkerMessage done;
  v1::HarnessDone& report = *done.mutable_harness_done();
  const std::string written = WriteFiles(sandbox, run);
  Relay relay(*link.stream);
  std::thread reader;
  if (!written.empty()) {
    report.set_error(written);
  } else {
    reader = std::thread([&] { relay.Read(); });
    const int port = run.port() > 0 ? run.port() : kDefaultPort;
    const std::string origin = absl::StrCat("http://127.0.0.1:", port);
    SandboxEndpoint endpoint;
    endpoint.port = port;
    endpoint.env = {absl::StrCat("LOOM_PROBLEM=", run.problem()),
                    absl::StrCat("LOOM_ENDPOINT=", origin),
                    absl::StrCat("OPENAI_BASE_URL=", origin, "/v1"),
                    absl::StrCat("OPENAI_API_KEY=", run.api_key()),
                    absl::StrCat("ANTHROPIC_BASE_URL=", origin),
                    absl::StrCat("ANTHROPIC_API_KEY=", run.api_key())};
    for (const auto& [name, value] : run.env()) {
      endpoint.env.push_back(absl::StrCat(name, "=", value));
    }
    std::unique_ptr<serve::HttpServer> server;
    std::thread serving;
    endpoint.serve = [&](int listen_fd) {
      serve::HttpLimits limits;
      limits.max_body_bytes = kMaxRelayedBody;
      server = serve::HttpServer::Adopt(
          listen_fd, limits, [&](const serve::HttpRequest& request, serve::HttpResponder& out) {
            relay.Handle(request, out);
          });
      serving = std::thread([&] { server->Run(); });
    };
    endpoint.stop = [&] { return relay.StopReason(); };
    const double timeout_s = run.timeout_s() > 0 ? std::min(run.timeout_s(), max_s) : max_s;
    auto ran = sandbox.Serve(run.command(), timeout_s, endpoint);
    relay.HarnessEnded();
    if (server != nullptr) {
      server->Stop();
      serving.join();
      server.reset();  // waits for every connection's thread
    }
    if (!ran.ok()) {
      report.set_error(std::string(ran.status().message()));
    } else {
      report.set_exit_code(ran->exit_code);
      report.set_stdout(ran->stdout_text);
      report.set_stderr(ran->stderr_text);
      report.set_timed_out(ran->timed_out);
      report.set_limit(ran->limit);
      report.set_duration_ms(ran->duration_ms);
    }
    report.set_calls(static_cast<int32_t>(relay.calls()));
    if (run.has_verification() && ran.ok()) {
      *report.mutable_verdict() = Verify(
          sandbox, run.verification(), std::string(absl::StripAsciiWhitespace(ran->stdout_text)),
          std::min(max_s, kVerifyTimeoutS), report.mutable_commands());
    }
  }
  spdlog::debug("session {}: harness ended (exit {}, {} calls{})", id, report.exit_code(),
                report.calls(), report.error().empty() ? "" : ", " + report.error());
  if (const std::string error = relay.protocol_error(); !error.empty()) {
    result.status = absl::InvalidArgumentError(error);
  } else {
    relay.Write(done);
  }
  link.watch->Waiting();
  if (reader.joinable()) reader.join();  // the client's next message, or its end
  link.watch->Working();
  result.next = relay.TakeNext();
  return result;
}

}  // namespace loom::sandbox
