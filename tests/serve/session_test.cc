// Harness sessions of the model endpoint: each session's own key and
// conversations, and the record it leaves for training (segments and calls);
// then the endpoint inside a real sandbox, relayed by a real `loom worker`
// process over its session stream to an endpoint in this process, with a
// probe and with Pi (installed from npm by scripts/setup.sh) as the
// sandbox's main process.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <thread>

#include "loom/agent/harness.h"
#include "loom/algo/sft_loss.h"
#include "loom/chat/encoder.h"
#include "loom/model/batch.h"
#include "loom/model/transformer.h"
#include "loom/serve/endpoint.h"
#include "loom/serve/turn_runner.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/train/adamw.h"
#include "sandbox/worker_fixture.h"
#include "serve/serve_process.h"

namespace loom {
namespace {

using nlohmann::json;
using testing::TempDir;

constexpr const char* kServerKey = "sk-server-own-key";
constexpr const char* kSessionA = "sk-session-a-0123456789";
constexpr const char* kSessionB = "sk-session-b-0123456789";

// A model endpoint in this process, on the model in `dir`.
struct LocalEndpoint {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<serve::TurnRunner> runner;
  std::unique_ptr<serve::Endpoint> endpoint;

  explicit LocalEndpoint(const std::string& dir) {
    auto tok = tokenizer::Tokenizer::FromFile(dir + "/tokenizer.json");
    EXPECT_TRUE(tok.ok()) << tok.status();
    tokenizer = *std::move(tok);
    auto loaded = model::Transformer::Load(dir, {});
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    model = *std::move(loaded);
    rollout::EngineOptions engine;
    engine.pool_tokens = 1 << 16;
    auto started = serve::TurnRunner::Start(*model, engine);
    EXPECT_TRUE(started.ok()) << started.status();
    runner = *std::move(started);
    serve::EndpointOptions options;
    options.model_name = "tiny";
    options.api_key = kServerKey;
    options.context_window = model->config().max_position_embeddings;
    auto created = serve::Endpoint::Create(*tokenizer, *runner, options);
    EXPECT_TRUE(created.ok()) << created.status();
    endpoint = *std::move(created);
  }
  ~LocalEndpoint() {
    endpoint.reset();
    runner.reset();  // before the model it borrows
  }
};

// The answer as a client reads it.
class Capture final : public serve::HttpResponder {
 public:
  bool Send(int status, std::string_view, std::string_view body) override {
    status_ = status;
    body_ = std::string(body);
    return true;
  }
  bool BeginEvents() override {
    status_ = 200;
    return true;
  }
  bool Event(std::string_view text) override {
    body_ += text;
    return true;
  }
  bool EndEvents() override { return true; }
  bool ClientGone() override { return false; }

  int status() const { return status_; }
  json Json() const { return json::parse(body_); }

 private:
  int status_ = 0;
  std::string body_;
};

serve::HttpRequest Post(const std::string& key, const json& body) {
  serve::HttpRequest request;
  request.method = "POST";
  request.path = "/v1/chat/completions";
  request.headers = {{"authorization", std::string("Bearer ") + key},
                     {"content-type", "application/json"}};
  request.body = body.dump();
  return request;
}

serve::SessionOptions Options(const std::string& key, const std::string& effort,
                              std::optional<double> temperature = std::nullopt) {
  serve::SessionOptions options;
  options.key = key;
  options.effort = effort;
  options.temperature = temperature;
  return options;
}

json Chat(json messages) {
  return {{"model", "tiny"}, {"messages", std::move(messages)}, {"max_tokens", 16}};
}

std::string Text(const tokenizer::Tokenizer& tokenizer, const std::vector<int64_t>& tokens) {
  auto text = tokenizer.Decode(std::vector<int32_t>(tokens.begin(), tokens.end()));
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

int64_t Generated(const rollout::SampleState& segment) {
  return std::accumulate(segment.loss_mask.begin(), segment.loss_mask.end(), int64_t{0});
}

TEST(SessionTest, SegmentsHoldEveryGeneratedTokenOnce) {
  TempDir dir;
  LocalEndpoint local(testing::AnswerXModel(dir));
  serve::Endpoint& endpoint = *local.endpoint;
  ASSERT_TRUE(endpoint.OpenSession(Options(kSessionA, "")).ok());

  json history = json::array({{{"role", "user"}, {"content", "Say x."}}});
  Capture first;
  endpoint.HandleSession(kSessionA, Post(kSessionA, Chat(history)), first);
  ASSERT_EQ(first.status(), 200);
  ASSERT_EQ(first.Json()["choices"][0]["message"]["content"], "x");
  // The harness re-sends the answer re-serialised (whitespace around it):
  // the conversation goes on on the same segment, on its stored tokens.
  history.push_back({{"role", "assistant"}, {"content", "  x\n"}});
  history.push_back({{"role", "user"}, {"content", "Again."}});
  Capture second;
  endpoint.HandleSession(kSessionA, Post(kSessionA, Chat(history)), second);
  ASSERT_EQ(second.status(), 200);
  // A compacted history extends nothing held: a new segment.
  Capture third;
  endpoint.HandleSession(
      kSessionA,
      Post(kSessionA, Chat({{{"role", "user"}, {"content", "We said x twice. Say x."}}})), third);
  ASSERT_EQ(third.status(), 200);

  auto record = endpoint.CloseSession(kSessionA, std::chrono::seconds(10));
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_EQ(record->segments.size(), 2u);
  ASSERT_EQ(record->calls.size(), 3u);
  EXPECT_EQ(record->lost_segments, 0);
  const auto& calls = record->calls;
  EXPECT_EQ(calls[0].segment, 0);
  EXPECT_FALSE(calls[0].continued);
  EXPECT_EQ(calls[1].segment, 0);
  EXPECT_TRUE(calls[1].continued);
  EXPECT_EQ(calls[2].segment, 1);
  EXPECT_FALSE(calls[2].continued);
  for (const serve::CallRecord& call : calls) {
    EXPECT_EQ(call.finish, "stop");
    EXPECT_GT(call.completion_tokens, 0);
    EXPECT_LE(call.start_s, call.end_s);
  }
  EXPECT_LE(calls[0].end_s, calls[1].start_s);
  // Every generated token is in exactly one segment, with its log-prob and
  // policy version; the rest (prompt, the harness's messages) is not trained.
  EXPECT_EQ(Generated(record->segments[0]),
            calls[0].completion_tokens + calls[1].completion_tokens);
  EXPECT_EQ(Generated(record->segments[1]), calls[2].completion_tokens);
  for (const rollout::SampleState& segment : record->segments) {
    for (size_t i = 0; i < segment.tokens.size(); ++i) {
      if (segment.loss_mask[i]) {
        EXPECT_LE(segment.logprobs[i], 0.0f);
        EXPECT_EQ(segment.versions[i], 0);
      } else {
        EXPECT_EQ(segment.versions[i], -1);
      }
    }
  }
  // The second call's context is the first's and its answer, as generated,
  // then only the new messages.
  EXPECT_GT(calls[1].context, calls[0].context + calls[0].completion_tokens);
  const auto& tokens = record->segments[0].tokens;
  EXPECT_EQ(
      Text(*local.tokenizer, {tokens.begin() + calls[0].context,
                              tokens.begin() + calls[0].context + calls[0].completion_tokens}),
      "</think>x<｜end▁of▁sentence｜>");

  // The key of a closed session opens nothing.
  Capture after;
  endpoint.Handle(Post(kSessionA, Chat(history)), after);
  EXPECT_EQ(after.status(), 401);
  EXPECT_EQ(endpoint.CloseSession(kSessionA, std::chrono::seconds(1)).status().code(),
            absl::StatusCode::kNotFound);
}

// Training through a harness pauses the runner around each weight update: a
// call that comes meanwhile waits (the harness sees a slow model), then
// generates under the new policy version on its conversation's KV.
TEST(SessionTest, APausedRunnerHoldsCallsAndResumesUnderTheNewVersion) {
  TempDir dir;
  LocalEndpoint local(testing::AnswerXModel(dir));
  serve::Endpoint& endpoint = *local.endpoint;
  ASSERT_TRUE(endpoint.OpenSession(Options(kSessionA, "")).ok());
  json history = json::array({{{"role", "user"}, {"content", "Say x."}}});
  Capture first;
  endpoint.HandleSession(kSessionA, Post(kSessionA, Chat(history)), first);
  ASSERT_EQ(first.status(), 200);

  local.runner->Pause();
  history.push_back({{"role", "assistant"}, {"content", "x"}});
  history.push_back({{"role", "user"}, {"content", "Again."}});
  Capture second;
  std::atomic<bool> answered{false};
  std::thread call([&] {
    endpoint.HandleSession(kSessionA, Post(kSessionA, Chat(history)), second);
    answered = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(answered.load()) << "a call was generated while paused";
  ASSERT_TRUE(local.runner->Resume(5).ok());
  call.join();
  ASSERT_EQ(second.status(), 200);

  auto record = endpoint.CloseSession(kSessionA, std::chrono::seconds(10));
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_EQ(record->segments.size(), 1u) << "the conversation went on on its segment";
  ASSERT_TRUE(record->calls[1].continued);
  const rollout::SampleState& segment = record->segments[0];
  const serve::CallRecord& before = record->calls[0];
  const serve::CallRecord& after = record->calls[1];
  for (int64_t i = 0; i < segment.length(); ++i) {
    if (!segment.loss_mask[i]) continue;
    const bool first_call = i >= before.context && i < before.context + before.completion_tokens;
    EXPECT_EQ(segment.versions[i], first_call ? 0 : 5) << "token " << i;
  }
  EXPECT_EQ(Generated(segment), before.completion_tokens + after.completion_tokens);
}

// A call records the tool calls it made and the tool results its request
// brought: those that end the conversation, in order, each with its size.
TEST(SessionTest, CallsRecordTheToolResultsTheHarnessSentBack) {
  TempDir dir;
  LocalEndpoint local(testing::AnswerXModel(dir));
  serve::Endpoint& endpoint = *local.endpoint;
  ASSERT_TRUE(endpoint.OpenSession(Options(kSessionA, "")).ok());
  const std::string long_result(1500, 'r');
  const json history = {
      {{"role", "user"}, {"content", "Say x."}},
      {{"role", "assistant"},
       {"content", ""},
       {"tool_calls",
        {{{"id", "call_a"},
          {"type", "function"},
          {"function", {{"name", "bash"}, {"arguments", "{\"command\": \"ls\"}"}}}},
         {{"id", "call_b"},
          {"type", "function"},
          {"function", {{"name", "bash"}, {"arguments", "{\"command\": \"pwd\"}"}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "call_a"}, {"content", "a.txt"}},
      {{"role", "tool"}, {"tool_call_id", "call_b"}, {"content", long_result}}};
  json body = Chat(history);
  const json parameters = {{"type", "object"}, {"properties", {{"command", {{"type", "string"}}}}}};
  body["tools"] = json::array(
      {{{"type", "function"}, {"function", {{"name", "bash"}, {"parameters", parameters}}}}});
  Capture answer;
  endpoint.HandleSession(kSessionA, Post(kSessionA, body), answer);
  ASSERT_EQ(answer.status(), 200) << answer.Json().dump();
  auto record = endpoint.CloseSession(kSessionA, std::chrono::seconds(10));
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_EQ(record->calls.size(), 1u);
  const std::vector<serve::ToolResultRecord>& results = record->calls[0].tool_results;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].call_id, "call_a");
  EXPECT_EQ(results[0].bytes, 5);
  EXPECT_EQ(results[0].head, "a.txt");
  EXPECT_EQ(results[1].call_id, "call_b");
  EXPECT_EQ(results[1].bytes, 1500);
  EXPECT_EQ(results[1].head, long_result.substr(0, serve::kToolResultHead));
  EXPECT_TRUE(record->calls[0].tool_calls.empty());  // the model answered "x"
}

TEST(SessionTest, SessionsNeverReachEachOther) {
  TempDir dir;
  LocalEndpoint local(testing::AnswerXModel(dir));
  serve::Endpoint& endpoint = *local.endpoint;
  ASSERT_TRUE(endpoint.OpenSession(Options(kSessionA, "")).ok());
  ASSERT_TRUE(endpoint.OpenSession(Options(kSessionB, "max")).ok());
  EXPECT_EQ(endpoint.OpenSession(Options(kSessionA, "")).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(endpoint.OpenSession(Options("short", "")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoint.OpenSession(Options("sk-long-enough-key-1", "warp")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoint.OpenSession(Options("sk-long-enough-key-1", "", -1.0)).code(),
            absl::StatusCode::kInvalidArgument);

  json history = json::array({{{"role", "user"}, {"content", "Say x."}}});
  Capture a;
  endpoint.HandleSession(kSessionA, Post(kSessionA, Chat(history)), a);
  ASSERT_EQ(a.status(), 200);
  // Session A's relay serves only A's key: B's key, the server's own key
  // and no key are refused there.
  for (const char* key : {kSessionB, kServerKey, "", "sk-session-a-012345678"}) {
    Capture refused;
    endpoint.HandleSession(kSessionA, Post(key, Chat(history)), refused);
    EXPECT_EQ(refused.status(), 401) << key;
  }
  // B sends A's conversation on: it is not held for B, so B begins its own
  // segment (with its own effort line), and A's stays where it was.
  history.push_back({{"role", "assistant"}, {"content", "x"}});
  history.push_back({{"role", "user"}, {"content", "Again."}});
  Capture b;
  endpoint.Handle(Post(kSessionB, Chat(history)), b);
  ASSERT_EQ(b.status(), 200);
  auto record_b = endpoint.CloseSession(kSessionB, std::chrono::seconds(10));
  ASSERT_TRUE(record_b.ok());
  ASSERT_EQ(record_b->calls.size(), 1u);
  EXPECT_FALSE(record_b->calls[0].continued);
  const std::string prompt = Text(*local.tokenizer, record_b->segments[0].tokens);
  EXPECT_NE(prompt.find("Reasoning Effort: 100"), std::string::npos) << prompt;
  auto record_a = endpoint.CloseSession(kSessionA, std::chrono::seconds(10));
  ASSERT_TRUE(record_a.ok());
  ASSERT_EQ(record_a->segments.size(), 1u);
  EXPECT_EQ(Generated(record_a->segments[0]), record_a->calls[0].completion_tokens);
  // The server's own session still answers, and keeps no record.
  Capture own;
  endpoint.Handle(Post(kServerKey, Chat(history)), own);
  EXPECT_EQ(own.status(), 200);
}

// A worker with the npm harnesses mounted, and a session on it.
struct SandboxedHarness {
  std::unique_ptr<rpc::LocalWorkers> workers;
  std::unique_ptr<rpc::WorkerSession> session;

  SandboxedHarness() {
    workers = testing_support::StartWorkers(
        1, 2, "", {"--harness-dir", std::string(LOOM_SOURCE_DIR) + "/third_party/npm"});
    if (workers == nullptr) return;
    v1::OpenSession open;
    auto opened = rpc::WorkerSession::Open(rpc::MakeChannel({workers->targets()[0], "", ""}), "",
                                           open, testing_support::In(300));
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (opened.ok()) session = *std::move(opened);
  }
};

// Runs `run` in `session`'s sandbox, its endpoint served as session
// `run.api_key()` of `endpoint` (no endpoint: every call fails with 500).
absl::StatusOr<v1::HarnessDone> RunServed(rpc::WorkerSession& session, serve::Endpoint* endpoint,
                                          const v1::RunHarness& run) {
  return session.RunHarness(run, [&](const serve::HttpRequest& request, serve::HttpResponder& out) {
    if (endpoint == nullptr) {
      out.Send(500, "text/plain", "no endpoint");
    } else {
      endpoint->HandleSession(run.api_key(), request, out);
    }
  });
}

constexpr const char* kProbe = R"(
import json, os, socket, urllib.error, urllib.request

base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]

def call(path, key, body=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(base + path, data, headers), timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None

out = {"models": call("/models", key)[0], "no_key": call("/models", "")[0],
       "other_key": call("/models", os.environ["OTHER_KEY"])[0]}
status, body = call("/chat/completions", key, {"model": "tiny", "max_tokens": 16,
    "messages": [{"role": "user", "content": os.environ["LOOM_PROBLEM"]}]})
out["answer"] = body["choices"][0]["message"]["content"]
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("127.0.0.1", int(os.environ["WORKER_PORT"])))
    out["worker"] = "reached"
except OSError as e:
    out["worker"] = type(e).__name__
print(json.dumps(out))
)";

TEST(HarnessSandboxTest, TheEndpointIsTheSandboxsOnlyWayOut) {
  TempDir dir;
  LocalEndpoint local(testing::AnswerXModel(dir));
  serve::Endpoint& endpoint = *local.endpoint;
  ASSERT_TRUE(endpoint.OpenSession(Options(kSessionA, "")).ok());
  ASSERT_TRUE(endpoint.OpenSession(Options(kSessionB, "")).ok());
  SandboxedHarness harness;
  ASSERT_NE(harness.session, nullptr);

  v1::RunHarness run;
  run.set_command("python3 \"$HOME/probe.py\"");
  run.set_problem("Say x.");
  run.set_api_key(kSessionA);
  (*run.mutable_files())["probe.py"] = kProbe;
  const std::string worker = harness.workers->targets()[0];
  (*run.mutable_env())["WORKER_PORT"] = worker.substr(worker.rfind(':') + 1);
  (*run.mutable_env())["OTHER_KEY"] = kSessionB;
  auto done = RunServed(*harness.session, &endpoint, run);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->exit_code(), 0) << done->stdout() << done->stderr() << done->limit();
  EXPECT_EQ(done->calls(), 4);
  const json out = json::parse(done->stdout());
  EXPECT_EQ(out["models"], 200);
  EXPECT_EQ(out["no_key"], 401);
  EXPECT_EQ(out["other_key"], 401);  // B's key, valid at the endpoint, is not A's
  EXPECT_EQ(out["answer"], "x");
  // The worker listens on the host's loopback, which the sandbox does not see.
  EXPECT_EQ(out["worker"], "ConnectionRefusedError");

  auto record = endpoint.CloseSession(kSessionA, std::chrono::seconds(10));
  ASSERT_TRUE(record.ok());
  ASSERT_EQ(record->segments.size(), 1u);
  EXPECT_EQ(Generated(record->segments[0]), record->calls[0].completion_tokens);
  EXPECT_TRUE(endpoint.CloseSession(kSessionB, std::chrono::seconds(1))->segments.empty());
  // The session goes on after the harness: its sandbox still serves tools.
  auto after = harness.session->Call(testing_support::BashCall("echo still here"));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->stdout(), "still here\n");
}

constexpr const char* kHangUp = R"(
import http.client, json, os, time, urllib.request

base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
out = {}
# A 4 MiB body, announced: the answer comes before any of it is sent.
big = http.client.HTTPConnection("127.0.0.1", 8000, timeout=30)
big.putrequest("POST", "/v1/chat/completions")
big.putheader("Content-Length", str(4 << 20))
big.putheader("Authorization", "Bearer " + key)
big.endheaders()
out["big"] = big.getresponse().status
body = {"model": "tiny", "stream": True, "max_tokens": 50000,
        "messages": [{"role": "user", "content": "Go on."}]}
r = urllib.request.urlopen(urllib.request.Request(base + "/chat/completions",
                                                  json.dumps(body).encode(), headers))
out["events"] = sum(1 for _ in range(6) if r.readline())
r.close()
time.sleep(2)
print(json.dumps(out))
)";

TEST(HarnessSandboxTest, AHarnessThatHangsUpCancelsItsTurn) {
  TempDir dir;
  LocalEndpoint local(testing::EndlessModel(dir));
  serve::Endpoint& endpoint = *local.endpoint;
  SandboxedHarness harness;
  ASSERT_NE(harness.session, nullptr);
  ASSERT_TRUE(endpoint.OpenSession(Options(kSessionA, "")).ok());  // its clock starts with the run
  v1::RunHarness run;
  run.set_command("python3 \"$HOME/hang_up.py\"");
  run.set_api_key(kSessionA);
  (*run.mutable_files())["hang_up.py"] = kHangUp;
  auto done = RunServed(*harness.session, &endpoint, run);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->exit_code(), 0) << done->stdout() << done->stderr();
  const json out = json::parse(done->stdout());
  EXPECT_EQ(out["big"], 413);  // refused at the worker: it never reached the endpoint
  EXPECT_EQ(out["events"], 6);
  EXPECT_EQ(done->calls(), 1);
  // The endless turn ended when the harness hung up (seconds before the
  // harness itself ended), freeing its sample.
  auto record = endpoint.CloseSession(kSessionA, std::chrono::seconds(10));
  ASSERT_TRUE(record.ok());
  ASSERT_EQ(record->calls.size(), 1u);
  EXPECT_EQ(record->calls[0].finish, "cancelled");
  EXPECT_LT(record->calls[0].end_s, done->duration_ms() / 1000.0 - 1.0);
  EXPECT_EQ(record->lost_segments, 0);
  ASSERT_EQ(record->segments.size(), 1u);
  EXPECT_LT(Generated(record->segments[0]), 50000);
}

TEST(HarnessSandboxTest, TheHarnessDiesWithItsTrainer) {
  SandboxedHarness harness;
  ASSERT_NE(harness.session, nullptr);
  v1::RunHarness run;
  run.set_command("sleep 300");
  run.set_api_key(kSessionA);
  std::thread trainer_leaves([&] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    harness.session->Cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  auto done = RunServed(*harness.session, nullptr, run);
  trainer_leaves.join();
  EXPECT_FALSE(done.ok()) << done->exit_code() << " " << done->limit();
  // The worker kills the harness and drops the sandbox at once, not after 300 s.
  v1::StatusReply status;
  for (int i = 0; i < 300; ++i) {
    status = testing_support::WorkerStatus(harness.workers->targets()[0]);
    if (status.live_sandboxes() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(status.live_sandboxes(), 0) << status.DebugString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(HarnessSandboxTest, MalformedRunsAreRefusedNamingTheField) {
  struct Case {
    std::function<void(v1::RunHarness&)> change;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::RunHarness& r) { r.set_command(" "); }, "run_harness.command"},
      {[](v1::RunHarness& r) { r.set_api_key("short"); }, "run_harness.api_key"},
      {[](v1::RunHarness& r) { r.set_port(70000); }, "run_harness.port"},
      {[](v1::RunHarness& r) { (*r.mutable_env())["A=B"] = "x"; }, "run_harness.env"},
      {[](v1::RunHarness& r) { (*r.mutable_files())["../escape"] = "x"; }, "run_harness.files"},
  };
  for (const Case& c : cases) {
    SandboxedHarness harness;
    ASSERT_NE(harness.session, nullptr);
    v1::RunHarness run;
    run.set_command("true");
    run.set_api_key(kSessionA);
    c.change(run);
    auto done = RunServed(*harness.session, nullptr, run);
    ASSERT_FALSE(done.ok()) << c.field;
    EXPECT_EQ(done.status().code(), absl::StatusCode::kInvalidArgument) << done.status();
    EXPECT_NE(done.status().message().find(c.field), std::string::npos) << done.status();
  }
}

bool Installed(const std::string& binary);

// A client that breaks the protocol mid-run (a tool call while the harness
// runs, or an answer outside a run) ends its session with INVALID_ARGUMENT,
// and the harness with it.
TEST(HarnessSandboxTest, AClientThatBreaksTheRelayProtocolIsRefused) {
  auto workers = testing_support::StartWorkers(1, 2);
  ASSERT_NE(workers, nullptr);
  auto stub = v1::SandboxWorker::NewStub(rpc::MakeChannel({workers->targets()[0], "", ""}));
  for (const bool during_run : {true, false}) {
    grpc::ClientContext context;
    rpc::PrepareContext(context, "", testing_support::In(60));
    auto stream = stub->Session(&context);
    v1::ClientMessage open;
    open.mutable_open();
    ASSERT_TRUE(stream->Write(open));
    v1::WorkerMessage opened;
    ASSERT_TRUE(stream->Read(&opened) && opened.has_opened());
    v1::ClientMessage wrong;
    if (during_run) {
      v1::ClientMessage run;
      run.mutable_run_harness()->set_command("sleep 300");
      run.mutable_run_harness()->set_api_key(kSessionA);
      ASSERT_TRUE(stream->Write(run));
      *wrong.mutable_tool_call() = testing_support::BashCall("true");
    } else {
      wrong.mutable_http_answer()->set_id(0);
    }
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(stream->Write(wrong));
    stream->WritesDone();
    v1::WorkerMessage ignored;
    while (stream->Read(&ignored)) {
    }
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << during_run;
    EXPECT_NE(status.error_message().find("http_answer"), std::string::npos)
        << status.error_message();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  }
}

// Pi's provider file for a loom endpoint at the sandbox's default port.
std::string PiModels() {
  const json models = {
      {"providers",
       {{"loom",
         {{"baseUrl", "http://127.0.0.1:8000/v1"},
          {"api", "openai-completions"},
          {"apiKey", "OPENAI_API_KEY"},  // the variable that holds the session's key
          {"models",
           {{{"id", "tiny"},
             {"reasoning", true},
             {"contextWindow", 16384},
             {"maxTokens", 512}}}}}}}}};
  return models.dump(2);
}

// Pi, offline, as the sandbox's main process, on session `key` of `endpoint`.
// `flags`: more of Pi's options, as a user configures it; `settings`: its
// settings.json ("" = the defaults).
absl::StatusOr<v1::HarnessDone> RunPi(rpc::WorkerSession& session, serve::Endpoint& endpoint,
                                      const std::string& key, const std::string& problem,
                                      const std::string& flags = "",
                                      const std::string& settings = "") {
  v1::RunHarness run;
  run.set_command("/opt/loom/harness/node_modules/.bin/pi -p --no-session --model loom/tiny " +
                  flags + " \"$LOOM_PROBLEM\"");
  run.set_problem(problem);
  run.set_api_key(key);
  run.set_timeout_s(120);
  (*run.mutable_files())["pi-agent/models.json"] = PiModels();
  if (!settings.empty()) (*run.mutable_files())["pi-agent/settings.json"] = settings;
  (*run.mutable_env())["PI_CODING_AGENT_DIR"] = "/tmp/pi-agent";
  (*run.mutable_env())["PI_OFFLINE"] = "1";
  (*run.mutable_env())["PI_TELEMETRY"] = "0";
  return RunServed(session, &endpoint, run);
}

TEST(HarnessSandboxTest, PiRunsInsideTheSandbox) {
  if (!Installed("pi")) GTEST_SKIP() << "Pi is not installed: run scripts/setup.sh";
  TempDir dir;
  // Pi's system prompt and tool schemas are about 6 kB.
  LocalEndpoint local(testing::AnswerXModel(dir, 16384));
  serve::Endpoint& endpoint = *local.endpoint;
  ASSERT_TRUE(endpoint.OpenSession(Options(kSessionA, "low")).ok());
  SandboxedHarness harness;
  ASSERT_NE(harness.session, nullptr);
  auto done = RunPi(*harness.session, endpoint, kSessionA, "Say x.");
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code(), 0) << done->stderr() << done->limit();
  EXPECT_EQ(done->stdout(), "x\n") << done->stderr();
  EXPECT_GE(done->calls(), 1);
  auto record = endpoint.CloseSession(kSessionA, std::chrono::seconds(10));
  ASSERT_TRUE(record.ok());
  ASSERT_FALSE(record->segments.empty());
  int64_t generated = 0, completed = 0;
  for (const auto& segment : record->segments) generated += Generated(segment);
  for (const auto& call : record->calls) completed += call.completion_tokens;
  EXPECT_EQ(generated, completed);
  // The session's effort, not Pi's own thinking level, is in the prompt.
  EXPECT_NE(Text(*local.tokenizer, record->segments[0].tokens).find("Reasoning Effort: 50"),
            std::string::npos);
}

// `run` as session A's harness, against a model that answers "x" on
// DeepSeek-V3's vocabulary (a harness's prompt takes as many tokens as on a
// real model). Checks that it printed `printed` last and that its session's
// segments hold every generated token once.
void RunAnsweringX(v1::RunHarness run, const std::string& printed) {
  TempDir dir;
  LocalEndpoint local(testing::AnswerXModel(dir, 32768, /*real_vocab=*/true));
  serve::Endpoint& endpoint = *local.endpoint;
  ASSERT_TRUE(endpoint.OpenSession(Options(kSessionA, "")).ok());
  SandboxedHarness harness;
  ASSERT_NE(harness.session, nullptr);
  run.set_problem("Say x.");
  run.set_api_key(kSessionA);
  run.set_timeout_s(180);
  auto done = RunServed(*harness.session, &endpoint, run);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code(), 0) << done->stdout() << done->stderr() << done->limit();
  const std::string& out = done->stdout();
  EXPECT_EQ(out.substr(out.size() - std::min(out.size(), printed.size())), printed)
      << out << done->stderr();
  EXPECT_GE(done->calls(), 1);
  auto record = endpoint.CloseSession(kSessionA, std::chrono::seconds(10));
  ASSERT_TRUE(record.ok());
  ASSERT_FALSE(record->segments.empty());
  EXPECT_EQ(record->lost_segments, 0);
  int64_t generated = 0, completed = 0;
  for (const auto& segment : record->segments) generated += Generated(segment);
  for (const auto& call : record->calls) completed += call.completion_tokens;
  EXPECT_EQ(generated, completed);
}

bool Installed(const std::string& binary) {
  return std::filesystem::exists(std::string(LOOM_SOURCE_DIR) +
                                 "/third_party/npm/node_modules/.bin/" + binary);
}

// Claude Code finds the endpoint and the key in ANTHROPIC_BASE_URL and
// ANTHROPIC_API_KEY, which the worker sets.
TEST(HarnessSandboxTest, ClaudeCodeRunsInsideTheSandbox) {
  if (!Installed("claude")) GTEST_SKIP() << "Claude Code is not installed: run scripts/setup.sh";
  v1::RunHarness run;
  run.set_command("/opt/loom/harness/node_modules/.bin/claude -p --model tiny \"$LOOM_PROBLEM\"");
  (*run.mutable_env())["DISABLE_TELEMETRY"] = "1";
  (*run.mutable_env())["DISABLE_AUTOUPDATER"] = "1";
  (*run.mutable_env())["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1";
  RunAnsweringX(run, "x\n");
}

// Codex reads its provider from $CODEX_HOME/config.toml, a file of the run.
TEST(HarnessSandboxTest, CodexRunsInsideTheSandbox) {
  if (!Installed("codex")) GTEST_SKIP() << "Codex is not installed: run scripts/setup.sh";
  v1::RunHarness run;
  run.set_command(
      "/opt/loom/harness/node_modules/.bin/codex exec --skip-git-repo-check \"$LOOM_PROBLEM\"");
  (*run.mutable_files())["codex/config.toml"] =
      "model = \"tiny\"\nmodel_provider = \"loom\"\nmodel_reasoning_effort = \"low\"\n"
      "[model_providers.loom]\nname = \"loom\"\nbase_url = \"http://127.0.0.1:8000/v1\"\n"
      "env_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n";
  (*run.mutable_env())["CODEX_HOME"] = "/tmp/codex";
  RunAnsweringX(run, "x\n");
}

// OpenCode's provider goes in its global config, the key through its
// {env:...} substitution.
TEST(HarnessSandboxTest, OpenCodeRunsInsideTheSandbox) {
  if (!Installed("opencode")) GTEST_SKIP() << "OpenCode is not installed: run scripts/setup.sh";
  const json config = {
      {"provider",
       {{"loom",
         {{"npm", "@ai-sdk/openai-compatible"},
          {"name", "loom"},
          {"options",
           {{"baseURL", "http://127.0.0.1:8000/v1"}, {"apiKey", "{env:OPENAI_API_KEY}"}}},
          {"models", {{"tiny", {{"name", "tiny"}}}}}}}}},
      {"model", "loom/tiny"}};
  v1::RunHarness run;
  run.set_command(
      "/opt/loom/harness/node_modules/.bin/opencode run --model loom/tiny \"$LOOM_PROBLEM\"");
  (*run.mutable_files())[".config/opencode/opencode.json"] = config.dump(2);
  (*run.mutable_env())["OPENCODE_DISABLE_AUTOUPDATE"] = "1";
  (*run.mutable_env())["npm_config_registry"] = "http://127.0.0.1:9/";
  RunAnsweringX(run, "x\n");
}

// One SFT example: the tokens a segment would hold, and which of them the
// model generates.
struct Example {
  std::vector<int64_t> tokens;
  std::vector<uint8_t> generated;
};

// AdamW steps on `example` until the model gives every generated token a
// probability above 0.6 (so that greedy decoding writes it); returns the
// smallest such probability reached.
double Teach(model::Transformer& model, const Example& example, int max_steps) {
  model.SetRequiresGrad(true);
  train::AdamW optimizer(model.NamedParameters(), {});
  const model::PackedBatch batch = model::TeacherForcingBatch({example.tokens});
  // Position t scores token t + 1.
  std::vector<float> mask(example.tokens.size(), 0.0f);
  for (size_t t = 0; t + 1 < example.tokens.size(); ++t) mask[t] = example.generated[t + 1];
  const at::Tensor loss_mask = at::tensor(mask);
  double worst = 0;
  for (int step = 0; step < max_steps; ++step) {
    optimizer.ZeroGrad();
    auto scored = model.Score(batch);
    EXPECT_TRUE(scored.ok()) << scored.status();
    if (!scored.ok()) break;
    const at::Tensor chosen = scored->logprobs.masked_select(loss_mask > 0);
    worst = std::exp(chosen.min().item<double>());
    if (worst > 0.6) break;
    algo::SftLoss(scored->logprobs, loss_mask).loss.backward();
    optimizer.ClipGradNorm(1.0);
    optimizer.Step(3e-3);
  }
  model.SetRequiresGrad(false);
  return worst;
}

std::vector<int64_t> Ids(const std::vector<chat::Message>& messages,
                         const chat::EncodeOptions& encode, const tokenizer::Tokenizer& tokenizer) {
  auto ids = chat::EncodeIds(messages, encode, tokenizer);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? std::vector<int64_t>(ids->begin(), ids->end()) : std::vector<int64_t>{};
}

bool StartsWith(const std::vector<int64_t>& all, const std::vector<int64_t>& prefix) {
  return all.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), all.begin());
}

// A model taught one demonstration in Pi's own rendered prompt (a bash call,
// then "Done." after its result) calls the tool through Pi: Pi runs it in
// the sandbox and sends the result back, which continues the same segment.
TEST(HarnessSandboxTest, PiRunsAToolCallTheModelWasTaught) {
  if (!Installed("pi")) GTEST_SKIP() << "Pi is not installed: run scripts/setup.sh";
  TempDir dir;
  const std::string untrained = testing::InitModel(dir, "untrained", 16384);
  const std::string problem = "Write hi to note.txt.";
  // Pi set up for a small model: a one-line system prompt and only its bash
  // tool (its default prompt would make every SFT step ~20 s here), and no
  // compaction (with a 16k context and its 16k reserve it compacts after
  // every turn).
  const std::string pi_flags =
      "--system-prompt 'You are a coding agent.' --tools bash --no-context-files --no-skills";
  const std::string pi_settings = R"({"compaction": {"enabled": false}})";
  SandboxedHarness harness;
  ASSERT_NE(harness.session, nullptr);

  // Pi's first prompt, exactly as the endpoint renders it.
  std::vector<int64_t> prompt;
  {
    LocalEndpoint local(untrained);
    ASSERT_TRUE(local.endpoint->OpenSession(Options(kSessionA, "low")).ok());
    auto done = RunPi(*harness.session, *local.endpoint, kSessionA, problem, pi_flags, pi_settings);
    ASSERT_TRUE(done.ok()) << done.status();
    auto record = local.endpoint->CloseSession(kSessionA, std::chrono::seconds(10));
    ASSERT_TRUE(record.ok() && !record->calls.empty());
    const serve::CallRecord& first = record->calls[0];
    ASSERT_GE(first.segment, 0);
    const auto& tokens = record->segments[first.segment].tokens;
    prompt.assign(tokens.begin(), tokens.begin() + first.context);
  }

  // The demonstration in the chat format, after that prompt: the call (up to
  // the end of its block, where the engine stops), the result Pi's bash tool
  // gives for a command with no output, and the closing answer.
  auto tok = tokenizer::Tokenizer::FromFile(untrained + "/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  chat::EncodeOptions encode;
  encode.drop_thinking = false;
  encode.reasoning_effort.kind = chat::ReasoningEffort::Kind::kNumeric;
  encode.reasoning_effort.b = 50;  // the session's "low"
  std::vector<chat::Message> conversation(1);
  conversation[0].content = problem;
  const std::vector<int64_t> asked = Ids(conversation, encode, **tok);
  chat::Message call;
  call.role = chat::Role::kAssistant;
  call.tool_calls = {{"call_0_0", "bash", R"({"command": "echo hi > note.txt"})"}};
  conversation.push_back(call);
  chat::Message result;
  result.role = chat::Role::kTool;
  result.tool_call_id = "call_0_0";
  result.content = "(no output)";
  conversation.push_back(result);
  const std::vector<int64_t> answered = Ids(conversation, encode, **tok);
  chat::Message done_message;
  done_message.role = chat::Role::kAssistant;
  done_message.content = "Done.";
  conversation.push_back(done_message);
  const std::vector<int64_t> whole = Ids(conversation, encode, **tok);
  ASSERT_TRUE(StartsWith(answered, asked) && StartsWith(whole, answered));
  auto calls_end = chat::ToolCallsEndIds(**tok);
  ASSERT_TRUE(calls_end.ok());
  auto block_end = std::search(answered.begin() + asked.size(), answered.end(), calls_end->begin(),
                               calls_end->end());
  ASSERT_NE(block_end, answered.end());
  const size_t call_end = (block_end - answered.begin()) + calls_end->size();
  Example example;
  example.tokens = prompt;
  example.tokens.insert(example.tokens.end(), whole.begin() + asked.size(), whole.end());
  example.generated.assign(example.tokens.size(), 0);
  const size_t shift = prompt.size() - asked.size();
  for (size_t i = asked.size(); i < call_end; ++i) example.generated[i + shift] = 1;
  for (size_t i = answered.size(); i < whole.size(); ++i) example.generated[i + shift] = 1;

  const std::string taught = dir / "taught";
  {
    auto model = model::Transformer::Load(untrained, {});
    ASSERT_TRUE(model.ok());
    EXPECT_GT(Teach(**model, example, 300), 0.6);
    ASSERT_TRUE((*model)->Save(taught).ok());
    std::filesystem::copy_file(untrained + "/tokenizer.json", taught + "/tokenizer.json");
  }

  LocalEndpoint local(taught);
  ASSERT_TRUE(local.endpoint->OpenSession(Options(kSessionA, "low", /*temperature=*/0.0)).ok());
  auto done = RunPi(*harness.session, *local.endpoint, kSessionA, problem, pi_flags, pi_settings);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code(), 0) << done->stderr();
  EXPECT_EQ(done->stdout(), "Done.\n") << done->stderr();
  // Pi ran the call in the sandbox's workspace.
  auto note = harness.session->Call(testing_support::BashCall("cat note.txt"));
  ASSERT_TRUE(note.ok());
  EXPECT_EQ(note->stdout(), "hi\n");
  // The call and the turn after its result are one segment: the result's
  // tokens were appended to the tokens the model generated.
  auto record = local.endpoint->CloseSession(kSessionA, std::chrono::seconds(10));
  ASSERT_TRUE(record.ok());
  ASSERT_GE(record->calls.size(), 2u);
  EXPECT_EQ(record->calls[0].finish, "tool_calls");
  EXPECT_FALSE(record->calls[0].format_error);
  EXPECT_TRUE(record->calls[1].continued);
  EXPECT_EQ(record->calls[1].segment, record->calls[0].segment);
  EXPECT_EQ(record->calls[1].finish, "stop");
  const rollout::SampleState& segment = record->segments[record->calls[0].segment];
  EXPECT_EQ(segment.tokens, example.tokens);
  EXPECT_EQ(segment.loss_mask, example.generated);
  // The call's tool, and the result Pi sent back with the next call: the
  // trajectory log pairs them, with the time between.
  ASSERT_EQ(record->calls[0].tool_calls.size(), 1u);
  const chat::ToolCall& tool = record->calls[0].tool_calls[0];
  EXPECT_EQ(tool.name, "bash");
  ASSERT_EQ(record->calls[1].tool_results.size(), 1u);
  EXPECT_EQ(record->calls[1].tool_results[0].call_id, tool.id);
  EXPECT_EQ(record->calls[1].tool_results[0].head, "(no output)");
  agent::HarnessEpisode episode;
  episode.harness = "pi";
  episode.record = *record;
  const json tools = agent::HarnessEpisodeJson(episode)["tools"];
  ASSERT_EQ(tools.size(), 1u) << tools.dump();
  EXPECT_EQ(tools[0]["name"], "bash");
  EXPECT_EQ(tools[0]["arguments"], tool.arguments);
  EXPECT_EQ(tools[0]["result_head"], "(no output)");
  EXPECT_EQ(tools[0]["result_bytes"], 11);
  EXPECT_GE(tools[0]["seconds"].get<double>(), 0.0);
  EXPECT_LE(tools[0]["seconds"].get<double>(), record->calls[1].start_s - record->calls[0].start_s);
}

}  // namespace
}  // namespace loom
