// A real `loom worker` process on loopback: tool calls over gRPC, admission
// control, load reports, auth, malformed requests, containment with the
// worker still serving, and the `loom sandbox exec` CLI and its exit codes.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "loom/sandbox/sandbox.h"
#include "worker_fixture.h"

namespace loom {
namespace {

using testing_support::BashCall;
using testing_support::OpenOn;
using testing_support::RunCommand;
using testing_support::StartWorkers;
using testing_support::WorkerStatus;

std::string TokenFile(const std::string& token) {
  std::string path = ::testing::TempDir() + "/loom_token_" + std::to_string(getpid());
  std::ofstream(path) << token << "\n";
  return path;
}

// Runs `loom worker ARGS` until it prints its "listening on" line (waiting up to 60 s: loading
// LibTorch on a busy machine takes seconds), then stops it with SIGTERM. Returns what it printed,
// stderr included.
std::string OutputUntilListening(const std::string& args) {
  std::string out;
  RunCommand("bash -c 'coproc W { exec " + std::string(LOOM_BINARY) + " worker " + args +
                 " 2>&1; }; while IFS= read -r -t 60 line <&\"${W[0]}\"; do echo \"$line\"; "
                 "case $line in *\"listening on\"*) break;; esac; done; "
                 "kill $W_PID 2>/dev/null; wait $W_PID'",
             &out);
  return out;
}

TEST(WorkerTest, RunsToolCallsInASession) {
  auto workers = StartWorkers(1, 2);
  ASSERT_TRUE(workers);
  v1::Environment env;
  (*env.mutable_files())["hello.txt"] = "hi there";
  env.set_setup_command("echo setup > setup.txt");
  auto session = OpenOn(workers->targets()[0], "", env);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->opened().setup().exit_code(), 0);
  auto result = (*session)->Call(BashCall("cat hello.txt setup.txt; exit 7"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code(), 7);
  EXPECT_EQ(result->stdout(), "hi theresetup\n");
  EXPECT_TRUE((*session)->Close().ok());
}

TEST(WorkerTest, RefusesOverCapacityAtOnceAndReportsLoad) {
  auto workers = StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  const std::string target = workers->targets()[0];
  auto first = OpenOn(target);
  ASSERT_TRUE(first.ok()) << first.status();
  v1::StatusReply load = WorkerStatus(target);
  EXPECT_EQ(load.live_sandboxes(), 1);
  EXPECT_EQ(load.capacity(), 1);
  auto second = OpenOn(target);
  EXPECT_TRUE(absl::IsResourceExhausted(second.status())) << second.status();
  EXPECT_EQ(WorkerStatus(target).refused(), 1);
  ASSERT_TRUE((*first)->Close().ok());
  auto third = OpenOn(target);
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST(WorkerTest, RequiresTheAuthToken) {
  auto workers = StartWorkers(1, 2, TokenFile("s3cret"));
  ASSERT_TRUE(workers);
  const std::string target = workers->targets()[0];
  EXPECT_TRUE(absl::IsUnauthenticated(OpenOn(target).status()));
  for (const char* wrong : {"wrong", "s3cre", "s3cret!", "S3CRET", "s3cret s3cret"}) {
    EXPECT_TRUE(absl::IsUnauthenticated(OpenOn(target, wrong).status())) << wrong;
  }
  grpc::Status status;
  WorkerStatus(target, "", &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto session = OpenOn(target, "s3cret");
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->Call(BashCall("echo ok"))->stdout(), "ok\n");
}

// Sends raw client messages and returns the stream's final status.
grpc::Status SendRaw(const std::string& target, const std::vector<v1::ClientMessage>& messages,
                     bool deadline = true) {
  auto stub = v1::SandboxWorker::NewStub(rpc::MakeChannel({target, "", ""}));
  grpc::ClientContext context;
  if (deadline) context.set_deadline(testing_support::In(30));
  auto stream = stub->Session(&context);
  for (const auto& m : messages) stream->Write(m);
  stream->WritesDone();
  v1::WorkerMessage reply;
  while (stream->Read(&reply)) {
  }
  return stream->Finish();
}

TEST(WorkerTest, MalformedRequestsGetInvalidArgument) {
  auto workers = StartWorkers(1, 2);
  ASSERT_TRUE(workers);
  const std::string target = workers->targets()[0];
  v1::ClientMessage call;
  *call.mutable_tool_call() = BashCall("true");
  EXPECT_EQ(SendRaw(target, {call}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClientMessage bad_open;
  (*bad_open.mutable_open()->mutable_environment()->mutable_files())["../x"] = "y";
  EXPECT_EQ(SendRaw(target, {bad_open}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClientMessage open;
  open.mutable_open();
  EXPECT_EQ(SendRaw(target, {open, open}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClientMessage stray;
  stray.mutable_generated()->set_turn(0);
  EXPECT_EQ(SendRaw(target, {open, stray}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClientMessage episode;
  episode.mutable_run_episode()->mutable_task()->set_problem("no verification");
  EXPECT_EQ(SendRaw(target, {open, episode}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(SendRaw(target, {v1::ClientMessage()}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(SendRaw(target, {open}, /*deadline=*/false).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A first message that does not parse (a proto3 string that is not UTF-8),
  // and none at all.
  v1::ClientMessage garbled;
  garbled.mutable_open()->set_label("\xff\xfe");
  EXPECT_EQ(SendRaw(target, {garbled}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(SendRaw(target, {}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The worker still serves, with every slot free again.
  EXPECT_EQ(WorkerStatus(target).live_sandboxes(), 0);
  EXPECT_TRUE(OpenOn(target).ok());
}

TEST(WorkerTest, StreamsThatNeverOpenHoldNoSlotAndQuietOnesAreCancelled) {
  auto workers = StartWorkers(1, 1, "", {"--idle-timeout-s", "1", "--open-timeout-s", "1"});
  ASSERT_TRUE(workers);
  const std::string target = workers->targets()[0];
  auto stub = v1::SandboxWorker::NewStub(rpc::MakeChannel({target, "", ""}));
  grpc::ClientContext silent;
  silent.set_deadline(testing_support::In(60));
  auto stream = stub->Session(&silent);  // never sends `open`
  usleep(200000);
  EXPECT_EQ(WorkerStatus(target).live_sandboxes(), 0);
  auto session = OpenOn(target);  // the one slot is still free
  ASSERT_TRUE(session.ok()) << session.status();
  const auto start = std::chrono::steady_clock::now();
  v1::WorkerMessage reply;
  EXPECT_FALSE(stream->Read(&reply));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(waited, 5.0) << "the 60 s deadline was not the limit";
  // The open session went quiet too, and lost its slot.
  sleep(2);
  EXPECT_FALSE((*session)->Call(BashCall("true")).ok());
  EXPECT_EQ(WorkerStatus(target).live_sandboxes(), 0);
}

// 1000 streams that never open once took a worker from 12 to 1011 threads.
TEST(WorkerTest, UnopenedStreamsAreCappedInNumberAndTime) {
  auto workers = StartWorkers(1, 1, "", {"--max-unopened", "3", "--open-timeout-s", "2"});
  ASSERT_TRUE(workers);
  const std::string target = workers->targets()[0];
  auto stub = v1::SandboxWorker::NewStub(rpc::MakeChannel({target, "", ""}));
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::WorkerMessage>>>
      streams;
  for (int i = 0; i < 4; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(testing_support::In(60));
    streams.push_back(stub->Session(contexts.back().get()));
    usleep(200000);  // the worker takes each in turn
  }
  const auto start = std::chrono::steady_clock::now();
  v1::WorkerMessage reply;
  EXPECT_FALSE(streams[3]->Read(&reply));
  EXPECT_EQ(streams[3]->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(streams[i]->Read(&reply));
    EXPECT_EQ(streams[i]->Finish().error_code(), grpc::StatusCode::CANCELLED) << i;
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 6.0) << "cut off by --open-timeout-s, not the 60 s deadline";
  EXPECT_TRUE(OpenOn(target).ok()) << "the worker serves on";
}

TEST(WorkerTest, SetupResultIsMadeLikeAToolResult) {
  // Output past the per-stream cap is cut, and the setup result says so, as a
  // tool call's result would; bytes that are not UTF-8 arrive repaired.
  auto workers = StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  v1::Environment env;
  env.set_setup_command("printf 'a\\377b' >&2; head -c 200000 /dev/zero | tr '\\0' x");
  auto session = OpenOn(workers->targets()[0], "", env);
  ASSERT_TRUE(session.ok()) << session.status();
  const v1::ToolResult& setup = (*session)->opened().setup();
  EXPECT_EQ(setup.exit_code(), 0);
  EXPECT_TRUE(setup.truncated());
  EXPECT_LT(setup.stdout().size(), 100000u);
  EXPECT_EQ(setup.stderr(),
            "a\xEF\xBF\xBD"
            "b");
}

TEST(WorkerTest, ClientTimeoutsAndSessionsAreCappedByTheWorker) {
  auto workers = StartWorkers(1, 1, "", {"--max-command-s", "1", "--max-session-s", "3"});
  ASSERT_TRUE(workers);
  v1::Environment env;
  env.set_setup_command("sleep 10");
  env.set_setup_timeout_s(100);
  const auto start = std::chrono::steady_clock::now();
  auto session = OpenOn(workers->targets()[0], "", env);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE((*session)->opened().setup().timed_out());
  auto call = (*session)->Call(BashCall("sleep 10"));  // asks for the default (worker cap)
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_TRUE(call->timed_out());
  EXPECT_LT(call->duration_ms(), 3000);
  // The session's own deadline is 60 s; the worker ends it at 3 s.
  bool ended = false;
  while (!ended && std::chrono::steady_clock::now() - start < std::chrono::seconds(8)) {
    ended = !(*session)->Call(BashCall("true")).ok();
    usleep(200000);
  }
  EXPECT_TRUE(ended);
  EXPECT_GT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500));
}

TEST(WorkerTest, RefusesOpenListeningWithoutATokenAndUnsafeRoots) {
  const std::string loom = LOOM_BINARY;
  std::string out;
  // Each refusal ends the worker by itself; the timeout only bounds a worker that wrongly serves.
  const std::string worker = "timeout -s TERM 60 " + loom + " worker --max-sandboxes 1 ";
  EXPECT_EQ(RunCommand(worker + "--listen 0.0.0.0:0 2>&1", &out), 2);
  EXPECT_NE(out.find("--allow-unauthenticated"), std::string::npos) << out;
  out = OutputUntilListening("--max-sandboxes 1 --listen 0.0.0.0:0 --allow-unauthenticated");
  EXPECT_NE(out.find("UNAUTHENTICATED worker"), std::string::npos) << out;
  EXPECT_NE(out.find("listening on 0.0.0.0:"), std::string::npos) << out;
  // A sandbox root that is a link, or someone else's directory, is refused.
  const std::string dir = ::testing::TempDir() + "/loom_roots_" + std::to_string(getpid());
  std::filesystem::create_directories(dir + "/elsewhere");
  std::filesystem::create_directory_symlink(dir + "/elsewhere", dir + "/link");
  EXPECT_EQ(RunCommand(worker + "--listen 127.0.0.1:0 --sandbox-root " + dir + "/link 2>&1", &out),
            1);
  EXPECT_NE(out.find("is not a directory (a link?)"), std::string::npos) << out;
  if (geteuid() == 0) {
    std::filesystem::create_directories(dir + "/theirs");
    ASSERT_EQ(chown((dir + "/theirs").c_str(), 65534, 65534), 0);
    EXPECT_EQ(
        RunCommand(worker + "--listen 127.0.0.1:0 --sandbox-root " + dir + "/theirs 2>&1", &out),
        1);
    EXPECT_NE(out.find("belongs to uid 65534"), std::string::npos) << out;
  }
  std::filesystem::remove_all(dir);
}

TEST(WorkerTest, ASessionSeesNothingOfTheOneBeforeIt) {
  auto workers = StartWorkers(1, 1);  // one slot: both sessions use it
  ASSERT_TRUE(workers);
  for (const char* seen : {"", "left"}) {
    auto session = OpenOn(workers->targets()[0]);
    ASSERT_TRUE(session.ok()) << session.status();
    auto listing = (*session)->Call(BashCall("ls -A /workspace /tmp /dev/shm | grep -c left"));
    ASSERT_TRUE(listing.ok()) << listing.status();
    EXPECT_EQ(listing->stdout(), "0\n") << "after a session that wrote '" << seen << "'";
    auto write = (*session)->Call(
        BashCall("echo x > /workspace/left && echo x > /tmp/left && echo x > /dev/shm/left"));
    ASSERT_TRUE(write.ok());
    EXPECT_EQ(write->exit_code(), 0) << write->stderr();
    ASSERT_TRUE((*session)->Close().ok());
  }
}

TEST(WorkerTest, KeepsServingAfterBombs) {
  auto workers = StartWorkers(1, 2);
  ASSERT_TRUE(workers);
  auto session = OpenOn(workers->targets()[0]);
  ASSERT_TRUE(session.ok());
  v1::ToolCall fork_bomb = BashCall("bomb() { bomb | bomb & }; bomb; sleep 5");
  fork_bomb.set_arguments_json(
      R"({"command": "bomb() { bomb | bomb & }; bomb; sleep 5", "timeout_s": 3})");
  EXPECT_TRUE((*session)->Call(fork_bomb).ok());
  auto memory = (*session)->Call(BashCall("python3 -c 'x = bytearray(4 << 30)'"));
  ASSERT_TRUE(memory.ok());
  EXPECT_NE(memory->exit_code(), 0);
  auto flood = (*session)->Call(BashCall("head -c 5000000 /dev/zero"));
  ASSERT_TRUE(flood.ok());
  EXPECT_TRUE(flood->truncated());
  auto other = OpenOn(workers->targets()[0]);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ((*other)->Call(BashCall("echo fine"))->stdout(), "fine\n");
}

TEST(WorkerTest, SandboxExecCliPrintsJsonAndMapsExitCodes) {
  auto workers = StartWorkers(1, 1, TokenFile("tok"));
  ASSERT_TRUE(workers);
  const std::string target = workers->targets()[0];
  const std::string exec = std::string(LOOM_BINARY) + " sandbox exec --worker " + target;
  const std::string token = " --auth-token-file " + TokenFile("tok");
  std::string out;
  EXPECT_EQ(RunCommand(exec + token + " -- echo 'a b' \"it's\"", &out), 0);
  EXPECT_NE(out.find(R"("exit_code":0,"stdout":"a b it's\n")"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(exec + token + " -- false", &out), 0);
  EXPECT_NE(out.find(R"("exit_code":1)"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(exec + " -- true 2>/dev/null", &out), 6);
  auto hold = OpenOn(target, "tok");  // takes the only slot
  ASSERT_TRUE(hold.ok());
  EXPECT_EQ(RunCommand(exec + token + " -- true 2>/dev/null", &out), 4);
  EXPECT_EQ(RunCommand(
                std::string(LOOM_BINARY) + " sandbox exec --worker 127.0.0.1:1 -- true 2>/dev/null",
                &out),
            5);
  EXPECT_EQ(RunCommand(exec + " 2>/dev/null", &out), 2);
}

TEST(WorkerTest, ListenOnPortZeroPrintsTheBoundAddress) {
  const std::string out = OutputUntilListening("--listen 127.0.0.1:0 --max-sandboxes 1");
  EXPECT_EQ(out.rfind("loom worker listening on 127.0.0.1:", 0), 0u) << out;
}

TEST(WorkerTest, DnsTargetReachesTheWorker) {
  auto workers = StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  const std::string port = workers->targets()[0].substr(workers->targets()[0].rfind(':') + 1);
  auto session = OpenOn("dns:///localhost:" + port);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->Call(BashCall("echo via-dns"))->stdout(), "via-dns\n");
}

TEST(WorkerTest, ServesTls) {
  const std::string dir = ::testing::TempDir();
  const std::string key = dir + "/loom_tls_key.pem", cert = dir + "/loom_tls_cert.pem";
  std::string out;
  ASSERT_EQ(RunCommand("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
                       "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
                           key + " -out " + cert + " 2>/dev/null",
                       &out),
            0);
  auto workers = StartWorkers(1, 1, "", {"--tls-cert", cert, "--tls-key", key});
  ASSERT_TRUE(workers);
  std::ifstream in(cert);
  std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  v1::OpenSession open;
  auto session = rpc::WorkerSession::Open(rpc::MakeChannel({workers->targets()[0], "", pem}), "",
                                          open, testing_support::In(30));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->Call(BashCall("echo secure"))->stdout(), "secure\n");
  ASSERT_TRUE((*session)->Close().ok());
  EXPECT_TRUE(absl::IsUnavailable(OpenOn(workers->targets()[0]).status()));  // plaintext
}

TEST(WorkerTest, SandboxesDieWithTheWorkerAndLeftoversAreCleanedAtStart) {
  const std::string root = ::testing::TempDir() + "/loom_sbx_root_" + std::to_string(getpid());
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  auto workers = StartWorkers(1, 1, "", {"--sandbox-root", root});
  ASSERT_TRUE(workers);
  auto session = OpenOn(workers->targets()[0]);
  ASSERT_TRUE(session.ok()) << session.status();
  std::thread call([&] { (*session)->Call(BashCall("sleep 31.4159")).IgnoreError(); });
  std::string out;
  for (int i = 0; i < 100 && RunCommand("pgrep -f 'sleep 31[.]4159'", &out) != 0; ++i)
    usleep(50000);
  ASSERT_EQ(RunCommand("pgrep -f 'sleep 31[.]4159'", &out), 0) << "the command never started";
  const std::string dead_dir = root + "/w" + std::to_string(workers->pid(0));
  workers->Kill(0);
  call.join();
  usleep(500000);
  EXPECT_NE(RunCommand("pgrep -f 'sleep 31[.]4159'", &out), 0) << "a sandbox outlived its worker";
  EXPECT_TRUE(std::filesystem::exists(dead_dir))
      << dead_dir << ": " << (RunCommand("ls -la " + root, &out), out);
  auto next = StartWorkers(1, 1, "", {"--sandbox-root", root});
  ASSERT_TRUE(next);
  EXPECT_FALSE(std::filesystem::exists(dead_dir)) << "leftovers of a dead worker were kept";
  next.reset();  // a live worker's directory holds its mounts
  // A worker stopped while it mounts a session (its health probe, under a
  // loaded machine) can leave that mount behind; the next worker's start
  // cleans it, as asserted above for a killed one. Clean the same way here.
  sandbox::CleanLeftovers(root);
  std::filesystem::remove_all(root, ec);
  EXPECT_FALSE(ec) << ec.message();
}
TEST(WorkerTest, MalformedCommandLinesAndFilesAreClearErrors) {
  const std::string loom = LOOM_BINARY;
  const std::string dir = ::testing::TempDir();
  const std::string empty = dir + "/loom_empty_token", junk = dir + "/loom_junk.pem";
  std::ofstream(empty) << "  \n";
  std::ofstream(junk) << "not a certificate\n";
  std::string out;
  const std::string worker = "timeout 20 " + loom + " worker --listen 127.0.0.1:0 ";
  EXPECT_EQ(RunCommand(worker + "--auth-token-file /nonexistent/token 2>&1", &out), 2);
  EXPECT_NE(out.find("/nonexistent/token"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(worker + "--auth-token-file " + empty + " 2>&1", &out), 2);
  EXPECT_NE(out.find("empty"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(worker + "--tls-cert " + junk + " 2>&1", &out), 2);
  EXPECT_EQ(RunCommand(worker + "--max-sandboxes 0 2>&1", &out), 2);
  EXPECT_EQ(RunCommand(worker + "--tls-cert " + junk + " --tls-key " + junk + " 2>&1", &out), 1);
  EXPECT_EQ(out.find("terminate"), std::string::npos) << out;
  EXPECT_EQ(RunCommand("timeout 20 " + loom +
                           " worker --listen not-an-address --allow-unauthenticated 2>&1",
                       &out),
            1);
  EXPECT_NE(out.find("cannot listen"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(loom + " sandbox exec --worker 127.0.0.1:1 --auth-token-file " +
                           "/nonexistent/token -- true 2>&1",
                       &out),
            2);
  EXPECT_EQ(
      RunCommand(loom + " sandbox exec --worker 127.0.0.1:1 --timeout-s -3 -- true 2>&1", &out), 2);
}

}  // namespace
}  // namespace loom
