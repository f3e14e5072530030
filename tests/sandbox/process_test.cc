// RunProcess on plain processes (no sandbox): exit codes, stdin, output
// caps, and the wall-clock timeout killing a whole process tree.

#include "loom/sandbox/process.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace loom::sandbox {
namespace {

ProcessSpec Bash(const std::string& script) {
  ProcessSpec spec;
  spec.argv = {"/bin/bash", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.timeout_s = 20;
  return spec;
}

TEST(ProcessTest, ReportsExitCodeAndOutput) {
  auto result = RunProcess(Bash("echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 3);
  EXPECT_EQ(result->stdout_text, "out\n");
  EXPECT_EQ(result->stderr_text, "err\n");
  EXPECT_FALSE(result->timed_out);
  EXPECT_FALSE(result->truncated);
}

TEST(ProcessTest, FeedsStdin) {
  ProcessSpec spec = Bash("tr a-z A-Z");
  spec.stdin_text = std::string(200000, 'x');  // larger than a pipe buffer
  spec.output_cap = 1 << 20;
  auto result = RunProcess(spec);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->stdout_text, std::string(200000, 'X'));
}

TEST(ProcessTest, KilledBySignalReports128PlusSignal) {
  auto result = RunProcess(Bash("kill -9 $$"));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->exit_code, 128 + 9);
}

TEST(ProcessTest, CapsOutputWithAMarker) {
  ProcessSpec spec = Bash("head -c 1000000 /dev/zero | tr '\\0' a");
  spec.output_cap = 1000;
  auto result = RunProcess(spec);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->truncated);
  EXPECT_EQ(result->stdout_text.substr(0, 1000), std::string(1000, 'a'));
  EXPECT_NE(result->stdout_text.find("output truncated, 999000 bytes dropped"), std::string::npos);
}

TEST(ProcessTest, TimeoutKillsTheWholeTree) {
  const std::string marker =
      testing::TempDir() + "/loom_process_marker_" + std::to_string(getpid());
  std::filesystem::remove(marker);
  // A grandchild that would create the marker after the timeout.
  ProcessSpec spec = Bash("(sleep 2; touch " + marker + ") & sleep 60");
  spec.timeout_s = 0.5;
  auto result = RunProcess(spec);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->timed_out);
  sleep(3);
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a grandchild outlived the timeout";
}

TEST(ProcessTest, MissingProgramExits127) {
  ProcessSpec spec;
  spec.argv = {"/nonexistent/program"};
  auto result = RunProcess(spec);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->exit_code, 127);
}

TEST(ProcessTest, EmptyArgvIsAnError) { EXPECT_FALSE(RunProcess(ProcessSpec()).ok()); }

}  // namespace
}  // namespace loom::sandbox
