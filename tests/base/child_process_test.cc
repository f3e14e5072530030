// The one child-process path: real programs started, their output, their
// environment, and every way a start or a child can fail.
#include "loom/base/child_process.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "loom/config/files.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class ChildProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom-child-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(ChildProcessTest, OutputAndEnvironmentReachTheChild) {
  setenv("LOOM_CHILD_TEST_KEEP", "kept", 1);
  setenv("LOOM_CHILD_TEST_DROP", "dropped", 1);
  setenv("LOOM_CHILD_TEST_SET", "old", 1);
  ChildOptions child;
  child.argv = {
      "/bin/sh", "-c",
      "echo out:$LOOM_CHILD_TEST_KEEP:${LOOM_CHILD_TEST_DROP-unset}:$LOOM_CHILD_TEST_SET; "
      "echo err >&2; read line || echo stdin-empty"};
  child.output = Path("log");
  child.null_stdin = true;
  child.unset_env = {"LOOM_CHILD_TEST_DROP"};
  child.set_env = {{"LOOM_CHILD_TEST_SET", "new"}};
  absl::StatusOr<pid_t> pid = StartChild(child);
  ASSERT_TRUE(pid.ok()) << pid.status();
  absl::StatusOr<int> code = WaitChild(*pid);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_EQ(*ReadFile(Path("log")), "out:kept:unset:new\nerr\nstdin-empty\n");
  unsetenv("LOOM_CHILD_TEST_KEEP");
  unsetenv("LOOM_CHILD_TEST_DROP");
  unsetenv("LOOM_CHILD_TEST_SET");
}

TEST_F(ChildProcessTest, AppendKeepsEarlierOutputAndTruncateDoesNot) {
  ChildOptions child;
  child.argv = {"/bin/echo", "line"};
  child.output = Path("log");
  for (bool append : {false, true, true}) {
    child.append_output = append;
    ASSERT_EQ(*WaitChild(*StartChild(child)), 0);
  }
  EXPECT_EQ(*ReadFile(Path("log")), "line\nline\nline\n");
  child.append_output = false;
  ASSERT_EQ(*WaitChild(*StartChild(child)), 0);
  EXPECT_EQ(*ReadFile(Path("log")), "line\n");
}

TEST_F(ChildProcessTest, ExitCodesAndSignalsAreOneNumber) {
  ChildOptions child;
  child.argv = {"/bin/sh", "-c", "exit 7"};
  EXPECT_EQ(*WaitChild(*StartChild(child)), 7);
  child.argv = {"/bin/sh", "-c", "kill -TERM $$"};
  EXPECT_EQ(*WaitChild(*StartChild(child)), 128 + SIGTERM);
}

TEST_F(ChildProcessTest, PollSeesARunningChildThenItsEnd) {
  ChildOptions child;
  child.argv = {"/bin/sleep", "30"};
  absl::StatusOr<pid_t> pid = StartChild(child);
  ASSERT_TRUE(pid.ok()) << pid.status();
  absl::StatusOr<std::optional<int>> running = PollChild(*pid);
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_FALSE(running->has_value());
  KillChild(*pid);
  EXPECT_NE(kill(*pid, 0), 0) << "a killed child is reaped, not a zombie";
  EXPECT_FALSE(PollChild(*pid).ok()) << "nothing is left to wait for";

  child.argv = {"/bin/true"};
  pid = StartChild(child);
  ASSERT_TRUE(pid.ok());
  std::optional<int> code;
  for (int i = 0; i < 500 && !code.has_value(); ++i) {
    code = *PollChild(*pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(code, std::optional<int>(0));
}

TEST_F(ChildProcessTest, AProgramThatCannotRunIsAnErrorNotAnExitCode) {
  ChildOptions child;
  child.argv = {Path("no-such-program")};
  absl::StatusOr<pid_t> pid = StartChild(child);
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("cannot run " + Path("no-such-program")), std::string::npos)
      << pid.status();
  EXPECT_NE(pid.status().message().find("No such file"), std::string::npos) << pid.status();

  child.argv = {"echo"};  // a bare name is a path, not a PATH search
  EXPECT_FALSE(StartChild(child).ok());
  child.argv = {};
  EXPECT_FALSE(StartChild(child).ok());
}

TEST_F(ChildProcessTest, AnOutputThatCannotBeWrittenStartsNothing) {
  ChildOptions child;
  child.argv = {"/bin/sh", "-c", "touch " + Path("ran")};
  child.output = Path("missing-dir/log");
  absl::StatusOr<pid_t> pid = StartChild(child);
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("cannot write " + Path("missing-dir/log")),
            std::string::npos)
      << pid.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(fs::exists(Path("ran")));
}

TEST_F(ChildProcessTest, ProgramOverridesArgvZero) {
  ChildOptions child;
  child.argv = {"renamed", "-c", "echo $0"};
  child.program = "/bin/sh";
  child.output = Path("log");
  ASSERT_EQ(*WaitChild(*StartChild(child)), 0);
  EXPECT_EQ(*ReadFile(Path("log")), "renamed\n");
}

}  // namespace
}  // namespace loom
