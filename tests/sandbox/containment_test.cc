// Containment of real bubblewrap sandboxes: network, host files, read-only
// system, timeouts over process trees, fork and memory bombs, output floods,
// file-size limits; plus the tools and verification kinds run inside them.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "loom/sandbox/tools.h"
#include "loom/sandbox/verify.h"
#include "loom/tasks/conversation.h"
#include "sandbox_fixture.h"

namespace loom::sandbox {
namespace {

namespace fs = std::filesystem;

// A listening TCP socket on the host's 127.0.0.1; returns its port.
int ListenOnLoopback(int* fd) {
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  listen(*fd, 4);
  socklen_t len = sizeof(addr);
  getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

v1::ToolCall Call(const std::string& name, const std::string& args) {
  v1::ToolCall call;
  call.set_id("c1");
  call.set_name(name);
  call.set_arguments_json(args);
  return call;
}

using ContainmentTest = SandboxFixture;

TEST_F(ContainmentTest, HostLoopbackIsUnreachable) {
  int fd = -1;
  int port = ListenOnLoopback(&fd);
  Make();
  ProcessResult r =
      Run("exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(port) + " && echo connected");
  close(fd);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.stdout_text.find("connected"), std::string::npos);
}

TEST_F(ContainmentTest, HostHomeAndProjectAreInvisible) {
  Make();
  ProcessResult r = Run(std::string("test -e ") + LOOM_SOURCE_DIR +
                        "/CMakeLists.txt || echo no-project; "
                        "ls /root >/dev/null 2>&1 || echo no-home; ls /");
  EXPECT_NE(r.stdout_text.find("no-project"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("no-home"), std::string::npos) << r.stdout_text;
}

TEST_F(ContainmentTest, SystemIsReadOnlyAndWorkspaceWritable) {
  Make();
  ProcessResult r =
      Run("touch /usr/loom_probe 2>/dev/null || echo usr-ro; "
          "touch /etc/loom_probe 2>/dev/null || echo etc-ro; "
          "echo hi > /workspace/f && echo hi > /tmp/t && echo writable");
  EXPECT_NE(r.stdout_text.find("usr-ro"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("etc-ro"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("writable"), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(fs::exists("/usr/loom_probe"));
}

TEST_F(ContainmentTest, WorkDirPersistsBetweenCommands) {
  v1::Environment env;
  (*env.mutable_files())["src/a.txt"] = "from the task\n";
  const Sandbox& box = Make(env);
  EXPECT_EQ(Run("cat src/a.txt").stdout_text, "from the task\n");
  Run("echo later > b.txt");
  EXPECT_EQ(Run("cat /workspace/b.txt").stdout_text, "later\n");
  EXPECT_TRUE(fs::exists(box.dir() + "/work/b.txt"));
}

TEST_F(ContainmentTest, TimeoutKillsTheProcessTree) {
  const Sandbox& box = Make();
  ProcessResult r = Run("(sleep 2; touch /workspace/marker) & setsid sleep 100 & sleep 100", 0.5);
  EXPECT_TRUE(r.timed_out);
  sleep(3);
  EXPECT_FALSE(fs::exists(box.dir() + "/work/marker")) << "a process outlived the timeout";
}

TEST_F(ContainmentTest, ForkBombIsContained) {
  Make();
  ProcessResult r = Run("bomb() { bomb | bomb & }; bomb; sleep 5", 3);
  (void)r;
  ProcessResult after = Run("echo alive");
  EXPECT_EQ(after.stdout_text, "alive\n");
}

TEST_F(ContainmentTest, MemoryBombIsContained) {
  Make();
  ProcessResult r = Run("python3 -c 'x = bytearray(4 << 30); print(len(x))'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.stderr_text.find("MemoryError"), std::string::npos) << r.stderr_text;
}

// What a command sees: $0 and its arguments, stdin, a syntax error, the
// environment (with BASH_ENV's process cap), the timeout over a process tree.
TEST_F(ContainmentTest, CommandSemantics) {
  const Sandbox& box = Make();
  auto run = [&](const std::string& command, const std::vector<std::string>& args = {},
                 const std::string& stdin_text = "", double timeout = 20) {
    auto result = box.Bash(command, timeout, args, stdin_text);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : ProcessResult();
  };
  ProcessResult args = run("echo \"$0|$1|$2|$#\"; exit 3", {"a b", "c"});
  EXPECT_EQ(args.stdout_text, "sandbox|a b|c|2\n");
  EXPECT_EQ(args.exit_code, 3);
  EXPECT_EQ(run("tr a-z A-Z", {}, "piped in\n").stdout_text, "PIPED IN\n");
  EXPECT_EQ(run("cat", {}, "").stdout_text, "") << "stdin must be at EOF";
  EXPECT_EQ(run("if then fi").exit_code, 2);
  EXPECT_EQ(run("echo $HOME $(ulimit -u); bash -c 'ulimit -u'").stdout_text, "/workspace 64\n64\n");
  EXPECT_EQ(run("ulimit -u 10 && bash -c 'ulimit -u'").stdout_text, "10\n")
      << "a nested bash keeps a limit the command lowered";
  ProcessResult slow = run("sleep 123.456 & setsid sleep 123.456 & sleep 123.456", {}, "", 0.3);
  EXPECT_TRUE(slow.timed_out);
  EXPECT_LT(slow.duration_ms, 2000);
  usleep(300000);
  EXPECT_NE(system("pgrep -f 'sleep 123[.]456' >/dev/null"), 0) << "a sleep survived";
}

TEST_F(ContainmentTest, OutputFloodIsTruncated) {
  Make();
  ProcessResult r = Run("yes flood", 1);
  EXPECT_TRUE(r.truncated);
  EXPECT_LT(r.stdout_text.size(), 4096u + 100u);
  EXPECT_NE(r.stdout_text.find("output truncated"), std::string::npos);
}

TEST_F(ContainmentTest, FileSizeIsLimited) {
  Make();
  ProcessResult r = Run("head -c 10000000 /dev/zero > big; echo status=$?; stat -c %s big");
  EXPECT_EQ(r.stdout_text.find("status=0"), std::string::npos) << r.stdout_text;
}

TEST_F(ContainmentTest, EnvironmentPathsMustStayInside) {
  for (const char* bad : {"../escape", "/etc/passwd", "a/../../b", ""}) {
    v1::Environment env;
    (*env.mutable_files())[bad] = "x";
    auto created = Sandbox::Create(config_, 0, "bad", env);
    EXPECT_TRUE(absl::IsInvalidArgument(created.status())) << bad;
  }
  v1::Environment env;
  env.set_dir("repo");
  EXPECT_TRUE(absl::IsInvalidArgument(Sandbox::Create(config_, 0, "bad", env).status()))
      << "a worker without --task-root serves no directories";
  config_.task_root = config_.root + "/tasks";
  std::filesystem::create_directories(config_.task_root + "/repo/src");
  std::ofstream(config_.task_root + "/repo/src/m.py") << "x = 1\n";
  for (const char* bad : {"missing", "../..", "/etc", "repo/../../.."}) {
    env.set_dir(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(Sandbox::Create(config_, 0, "bad", env).status())) << bad;
  }
  env.set_dir("repo");
  Make(env);
  EXPECT_EQ(Run("cat src/m.py").stdout_text, "x = 1\n");
}

TEST_F(ContainmentTest, EnvironmentFileCountAndBytesAreCapped) {
  config_.max_files = 3;
  config_.max_files_bytes = 100;
  v1::Environment env;
  for (const char* name : {"a", "b", "c"}) (*env.mutable_files())[name] = std::string(30, 'x');
  EXPECT_TRUE(Sandbox::Create(config_, 0, "ok", env).ok());
  (*env.mutable_files())["d"] = "x";
  EXPECT_TRUE(absl::IsInvalidArgument(Sandbox::Create(config_, 0, "many", env).status()));
  env.mutable_files()->erase("d");
  (*env.mutable_files())["c"] = std::string(50, 'x');
  auto big = Sandbox::Create(config_, 0, "big", env);
  EXPECT_TRUE(absl::IsInvalidArgument(big.status()));
  EXPECT_NE(big.status().message().find("110 bytes"), std::string::npos) << big.status();
}

TEST_F(ContainmentTest, ToolsRunInsideTheSandbox) {
  const Sandbox& box = Make();
  v1::ToolResult py =
      ExecuteTool(box, Call("python", R"j({"code": "print(123456789 * 987654321)"})j"), 20);
  EXPECT_EQ(py.stdout(), "121932631112635269\n");
  v1::ToolResult w =
      ExecuteTool(box, Call("write_file", R"({"path": "d/x.txt", "content": "abc"})"), 20);
  EXPECT_EQ(w.exit_code(), 0) << w.stderr();
  v1::ToolResult r = ExecuteTool(box, Call("read_file", R"({"path": "d/x.txt"})"), 20);
  EXPECT_EQ(r.stdout(), "abc");
  v1::ToolResult b =
      ExecuteTool(box, Call("bash", R"({"command": "sleep 5", "timeout_s": 0.3})"), 20);
  EXPECT_TRUE(b.timed_out());
}

TEST_F(ContainmentTest, MalformedToolCallsAreReportedNotRun) {
  const Sandbox& box = Make();
  for (const auto& [name, args] :
       std::vector<std::pair<std::string, std::string>>{{"bash", "not json"},
                                                        {"bash", "[1]"},
                                                        {"bash", R"({"command": 3})"},
                                                        {"python", "{}"},
                                                        {"rm_rf", "{}"},
                                                        {"submit", "{}"}}) {
    v1::ToolResult result = ExecuteTool(box, Call(name, args), 20);
    EXPECT_EQ(result.exit_code(), -1) << name << " " << args;
    EXPECT_FALSE(result.error().empty());
    EXPECT_EQ(tasks::RenderToolResult(result).rfind("error: ", 0), 0u);
  }
}

TEST_F(ContainmentTest, VerificationKinds) {
  v1::Environment env;
  (*env.mutable_files())["ok.sh"] = "exit 0\n";
  const Sandbox& box = Make(env);
  v1::Verification v;
  v.set_command("bash ok.sh");
  EXPECT_EQ(Verify(box, v, "", 10).reward(), 1.0);
  v.set_command("exit 1");
  EXPECT_EQ(Verify(box, v, "", 10).reward(), 0.0);
  v.set_exact_answer("42");
  EXPECT_EQ(Verify(box, v, " 42\n", 10).reward(), 1.0);
  EXPECT_EQ(Verify(box, v, "41", 10).reward(), 0.0);
  v.mutable_output_regex()->set_command("echo result=17");
  v.mutable_output_regex()->set_regex("result=1[0-9]");
  EXPECT_EQ(Verify(box, v, "", 10).reward(), 1.0);
  v.mutable_tests()->set_command("test {test} = yes");
  v.mutable_tests()->add_fail_to_pass("yes");
  EXPECT_EQ(Verify(box, v, "", 10).reward(), 1.0);
  v.mutable_tests()->add_pass_to_pass("no");
  v.mutable_tests()->add_pass_to_pass("yes");
  v1::Verdict verdict = Verify(box, v, "", 10);
  EXPECT_EQ(verdict.reward(), 0.0);
  EXPECT_NE(verdict.details().find("pass_to_pass no: FAIL"), std::string::npos);
  // The verdict is settled by the first failure: the test after it is not run.
  EXPECT_NE(verdict.details().find("pass_to_pass yes: not run"), std::string::npos)
      << verdict.details();
}

TEST(VerificationTest, MalformedVerificationsAreRejected) {
  v1::Verification none;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateVerification(none)));
  v1::Verification regex;
  regex.mutable_output_regex()->set_regex("([unclosed");
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateVerification(regex)));
  v1::Verification tests;
  tests.mutable_tests()->set_command("pytest");
  tests.mutable_tests()->add_fail_to_pass("t");
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateVerification(tests)));
}

}  // namespace
}  // namespace loom::sandbox
