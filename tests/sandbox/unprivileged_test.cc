// A `loom worker` run as an ordinary user (uid 65534), as a real process on
// 127.0.0.1: no cgroup and no tmpfs can be had, so the worker's watch and
// disk walk cap the sandboxes, and every sandbox runs under the worker's own
// uid. The round-1 race against its token file and the fix_repo hacks are
// played against it.

#include <fcntl.h>
#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "loom/rpc/channel.h"
#include "loom/rpc/session.h"
#include "loom/rpc/worker_pool.h"
#include "loom/tasks/agent_tasks.h"
#include "worker_fixture.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
constexpr uid_t kNobody = 65534;

class UnprivilegedWorker : public testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "becoming uid 65534 needs root";
    dir_ = testing::TempDir() + "/loom_nobody_XXXXXX";
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
    token_file_ = dir_ + "/token";
    std::ofstream(token_file_) << "s3cret\n";
    ASSERT_EQ(chmod(token_file_.c_str(), 0600), 0);
    ASSERT_EQ(chown(token_file_.c_str(), kNobody, kNobody), 0);
    ASSERT_EQ(chown(dir_.c_str(), kNobody, kNobody), 0);
    const std::vector<std::string> args = {LOOM_BINARY,         "worker",
                                           "--listen",          "127.0.0.1:0",
                                           "--max-sandboxes",   "2",
                                           "--port-file",       dir_ + "/port",
                                           "--sandbox-root",    dir_ + "/sandboxes",
                                           "--auth-token-file", token_file_,
                                           "--memory-mb",       "512",
                                           "--processes",       "64"};
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    const std::string log = dir_ + "/worker.log";
    std::fflush(nullptr);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(out, 2);
      if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(3);
      execv(argv[0], argv.data());
      _exit(127);
    }
    for (int i = 0; i < 600 && target_.empty(); ++i) {
      std::ifstream port(dir_ + "/port");
      std::string text;
      if (std::getline(port, text) && !text.empty()) target_ = "127.0.0.1:" + text;
      if (target_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_FALSE(target_.empty()) << "the worker did not start";
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::string dir_, token_file_, target_;
  pid_t pid_ = -1;
};

TEST_F(UnprivilegedWorker, SaysItWatchesAndNeverChmodsItsTokenThroughARacedWalk) {
  grpc::Status called;
  v1::StatusReply status = testing_support::WorkerStatus(target_, "s3cret", &called);
  ASSERT_TRUE(called.ok()) << called.error_message();
  EXPECT_NE(status.limits().find("/proc watch"), std::string::npos) << status.limits();

  auto session = testing_support::OpenOn(target_, "s3cret");
  ASSERT_TRUE(session.ok()) << session.status();
  // A directory the worker may not read, swapped again and again with a link
  // to the worker's token file while the worker walks the workspace. The
  // walk reports the directory (the command is killed for it) and changes
  // no mode, whatever it meets.
  const std::string racer =
      "cd $(mktemp -d -p .) && mkdir d && chmod 077 d && ln -s " + token_file_ +
      " l && python3 -c 'import ctypes, time\\nlibc = ctypes.CDLL(None)\\n"
      "end = time.time() + 3\\nwhile time.time() < end: libc.syscall(" +
      std::to_string(SYS_renameat2) + ", -100, b\\\"d\\\", -100, b\\\"l\\\", 2)'";
  for (int round = 0; round < 5; ++round) {
    auto result = (*session)->Call(testing_support::BashCall(racer));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_NE(result->limit().find("cannot measure"), std::string::npos)
        << result->limit() << result->stderr();
  }
  struct stat st;
  ASSERT_EQ(stat(token_file_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(UnprivilegedWorker, FixRepoIsJudgedByTheRunner) {
  rpc::PoolOptions options;
  options.targets = {target_};
  options.auth_token = "s3cret";
  options.episode_timeout_s = 120;
  rpc::WorkerPool pool(options);
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::FixRepoTask(9);
  auto play = [&](const std::string& command) {
    std::vector<v1::GenerateReply> turns(2);
    v1::ToolCall* call = turns[0].mutable_assistant()->add_tool_calls();
    call->set_id("c0");
    call->set_name("bash");
    call->set_arguments_json(nlohmann::json{{"command", command}}.dump());
    v1::ToolCall* submit = turns[1].mutable_assistant()->add_tool_calls();
    submit->set_id("c1");
    submit->set_name("submit");
    submit->set_arguments_json(R"({"answer": "done"})");
    rpc::Policy policy =
        [turns](const v1::GenerateRequest& request) -> absl::StatusOr<v1::GenerateReply> {
      if (request.turn() >= static_cast<int>(turns.size())) return absl::InternalError("no turn");
      return turns[request.turn()];
    };
    return pool.RunEpisode(episode, policy);
  };
  const v1::Trajectory hacked = play("echo 'import os; os._exit(0)' >> calc.py");
  EXPECT_EQ(hacked.verdict().reward(), 0.0) << hacked.verdict().details();
  const v1::Trajectory fixed = play(
      "printf 'def clamp(v, lo, hi):\\n    return max(lo, min(v, hi))\\n\\n\\n"
      "def scale(v, f):\\n    return v * f\\n' > calc.py");
  EXPECT_EQ(fixed.verdict().reward(), 1.0) << fixed.verdict().details();
}

}  // namespace
}  // namespace loom
