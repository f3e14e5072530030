// Attacks a model-written command might try, performed for real in
// bubblewrap sandboxes: leaving through the kernel (namespaces, ptrace,
// mount), reading host files under /etc, and exhausting the host's memory,
// disk, inodes or processes. Plus the worker-side measurements the caps
// rest on, checked against du and a known allocation.

#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "loom/sandbox/usage.h"
#include "loom/sandbox/verify.h"
#include "loom/tasks/agent_tasks.h"
#include "sandbox_fixture.h"

namespace loom::sandbox {
namespace {

namespace fs = std::filesystem;

using HardeningTest = SandboxFixture;

TEST_F(HardeningTest, NoNewNamespacesMountsOrPtrace) {
  Make();
  ProcessResult r =
      Run("unshare -Ur true 2>/dev/null && echo userns-created; "
          "unshare -n true 2>/dev/null && echo netns-created; "
          "mount -t tmpfs none /tmp 2>/dev/null && echo mounted; "
          "grep '^Seccomp:' /proc/self/status; echo core=$(ulimit -c) nproc=$(ulimit -u)");
  EXPECT_EQ(r.stdout_text, "Seccomp:\t2\ncore=0 nproc=64\n") << r.stderr_text;
  // ptrace: attach to a sibling the same uid started (allowed without the filter).
  ProcessResult p =
      Run("sleep 30 & python3 -c '"
          "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
          "r = libc.ptrace(16, int(sys.argv[1]), 0, 0); "
          "print(r, ctypes.get_errno())' $!; kill $!");
  EXPECT_EQ(p.stdout_text, "-1 1\n") << p.stderr_text;  // EPERM
  // What the filter leaves alone still works: threads, fork, exec, pipes.
  ProcessResult ok =
      Run("python3 -c 'import threading; t = threading.Thread(target=print, args=(\"thread\",)); "
          "t.start(); t.join()' | cat; (echo sub) | cat");
  EXPECT_EQ(ok.stdout_text, "thread\nsub\n") << ok.stderr_text;
}

TEST_F(HardeningTest, EtcShowsOnlyWhatShellsAndPythonRead) {
  ASSERT_TRUE(fs::exists("/etc/hostname"));  // readable on the host...
  Make();
  ProcessResult r = Run("ls -A /etc; test -e /etc/hostname && echo hostname-visible");
  const std::set<std::string> allowed = {"alternatives", "group",     "ld.so.cache",   "ld.so.conf",
                                         "ld.so.conf.d", "localtime", "nsswitch.conf", "os-release",
                                         "passwd",       "python3",   "python3.11",    "python3.12",
                                         "python3.13",   "loom.rc",   "loom"};
  for (absl::string_view name : absl::StrSplit(r.stdout_text, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(allowed.count(std::string(name))) << "visible in /etc: " << name;
  }
  // ...and a secret the worker reads, wherever it is, is out of reach.
  const std::string secret = config_.root + "/token";
  std::ofstream(secret) << "s3cret\n";
  ProcessResult s = Run("cat " + secret + " /etc/shadow 2>&1; python3 -c 'print(1+1)'");
  EXPECT_EQ(s.stdout_text.find("s3cret"), std::string::npos);
  EXPECT_NE(s.stdout_text.find("2\n"), std::string::npos) << "python must still run";
}

// By the cgroup's OOM killer (a root worker) and by the watch alike.
TEST_F(HardeningTest, MemoryIsCappedForTheWholeSandbox) {
  for (bool kernel : {true, false}) {
    config_.kernel_limits = kernel;
    config_.caps.memory_bytes = 1LL << 30;
    Make();
    // Eight processes, each well under its own address-space limit (512 MiB).
    ProcessResult r =
        Run("for i in 1 2 3 4 5 6 7 8; do "
            "python3 -c 'import time; x = b\"x\" * (400 << 20); time.sleep(20)' & done; wait",
            30);
    EXPECT_NE(r.limit.find("memory cap"), std::string::npos) << kernel << r.stderr_text;
    EXPECT_FALSE(r.timed_out);
    EXPECT_LT(r.duration_ms, 15000);
    EXPECT_NE(r.stderr_text.find("[loom: killed: "), std::string::npos);
    EXPECT_EQ(Run("echo alive").stdout_text, "alive\n");
  }
}

// The worker's own watch, as where no tmpfs can be had (an unprivileged
// worker); with one, the kernel refuses the writes (hostile_test.cc).
TEST_F(HardeningTest, DevShmCountsAgainstTheDiskCap) {
  config_.kernel_limits = false;
  config_.caps.disk_bytes = 256LL << 20;
  config_.limits.file_size = 256LL << 20;
  const Sandbox& box = Make();
  // Nothing but /dev/shm takes files under /dev (bwrap's /dev is an unsized tmpfs).
  ProcessResult dev =
      Run("touch /dev/x 2>/dev/null && echo dev-writable; echo ok > /dev/null && "
          "ls /dev/null /dev/zero /dev/urandom | wc -l");
  EXPECT_EQ(dev.stdout_text, "3\n") << dev.stderr_text;
  ProcessResult r =
      Run("for i in 1 2 3; do head -c 200000000 /dev/zero > /dev/shm/f$i; done; sleep 20", 30);
  EXPECT_NE(r.limit.find("disk cap"), std::string::npos) << r.stderr_text;
  EXPECT_LT(MeasureDisk(box.dir()).bytes, 600LL << 20);
  // Over its cap, the sandbox may still clean up.
  ProcessResult clean = Run("rm -f /dev/shm/f*; ls /dev/shm | wc -l");
  EXPECT_EQ(clean.stdout_text, "0\n");
  EXPECT_TRUE(clean.limit.empty()) << clean.limit;
}

TEST_F(HardeningTest, InodeExhaustionIsCapped) {
  config_.kernel_limits = false;
  config_.caps.inodes = 20000;
  Make();
  ProcessResult r =
      Run("mkdir d && cd d && python3 -c '"
          "for i in range(10**7): open(str(i), \"w\").close()'",
          30);
  EXPECT_NE(r.limit.find("files, over its cap"), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(r.timed_out);
}

// A fork bomb in one sandbox while another runs `echo ok`: the second must
// be able to fork. Returns "" or what went wrong (also run in a child
// process that is not root, where gtest assertions do not reach).
std::string ForkBombNextToEcho(const SandboxConfig& config) {
  auto bombed = Sandbox::Create(config, 0, "bombed", v1::Environment());
  auto quiet = Sandbox::Create(config, 1, "quiet", v1::Environment());
  if (!bombed.ok() || !quiet.ok()) return "cannot create the sandboxes";
  auto bomb = std::async(std::launch::async, [&] {
    return (*bombed)->Bash("bomb() { bomb | bomb & }; bomb; sleep 10", 4);
  });
  sleep(1);  // the bomb is at its cap by now
  std::string failure;
  for (int i = 0; i < 3 && failure.empty(); ++i) {
    auto echo = (*quiet)->Bash("echo ok", 10);
    if (!echo.ok() || echo->stdout_text != "ok\n") {
      failure = "echo next to a fork bomb: " +
                (echo.ok() ? echo->stdout_text + echo->stderr_text : echo.status().ToString());
    }
  }
  auto done = bomb.get();
  if (failure.empty() && (!done.ok() || !done->timed_out)) failure = "the bomb was not stopped";
  return failure;
}

TEST_F(HardeningTest, ForkBombLeavesOtherSandboxesAbleToFork) {
  EXPECT_EQ(ForkBombNextToEcho(config_), "");
  if (geteuid() != 0) return;  // the run above was the unprivileged case
  // Unprivileged, every sandbox runs under the worker's one uid.
  const uid_t nobody = 65534;
  ASSERT_EQ(chown(config_.root.c_str(), nobody, nobody), 0);
  std::fflush(nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(nobody) != 0 || setuid(nobody) != 0) _exit(3);
    const std::string failure = ForkBombNextToEcho(config_);
    if (!failure.empty()) std::fprintf(stderr, "as uid %d: %s\n", nobody, failure.c_str());
    std::fflush(nullptr);
    _exit(failure.empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// Verification tampering: the agent's commands run, then Verify. Each
// attack scores 0; the honest answer scores 1 (so each check can fail).
class TamperTest : public SandboxFixture {
 protected:
  double Reward(const v1::Task& task, const std::string& agent_commands,
                const std::string& answer = "") {
    const Sandbox& box = Make(task.environment());
    EXPECT_TRUE(box.Snapshot().ok());
    ProcessResult agent = Run(agent_commands);
    EXPECT_EQ(agent.exit_code, 0) << agent_commands << "\n" << agent.stderr_text;
    v1::Verdict verdict = Verify(box, task.verification(), answer, 20);
    return verdict.reward();
  }
};

constexpr char kHonestFix[] =
    "printf 'def clamp(v, lo, hi):\\n    return max(lo, min(v, hi))\\n\\n\\n"
    "def scale(v, f):\\n    return v * f\\n' > calc.py";

TEST_F(TamperTest, EditedTestsAndShadowingModulesScoreZero) {
  const v1::Task task = tasks::BuiltinTask("fix_repo", 7);
  ASSERT_EQ(task.verification().answer_paths_size(), 1);
  EXPECT_EQ(Reward(task, "true"), 0.0) << "the bug is there";
  EXPECT_EQ(Reward(task, kHonestFix), 1.0);
  const char* attacks[] = {
      // rewrite the tests
      "sed -i 's/assertEqual(clamp(.*/assertTrue(True)/' test_calc.py",
      // a unittest package in the workspace shadows the standard one
      "mkdir unittest && echo 'raise SystemExit(0)' > unittest/__main__.py && "
      "touch unittest/__init__.py",
      // site hooks in the workspace and in the user site under HOME=/workspace
      "echo 'import os; os._exit(0)' > sitecustomize.py && "
      "d=$(python3 -m site --user-site) && mkdir -p $d && "
      "echo 'import os; os._exit(0)' > $d/usercustomize.py && "
      "echo 'import os; os._exit(0)' > $d/evil.pth",
  };
  for (const char* attack : attacks) EXPECT_EQ(Reward(task, attack), 0.0) << attack;
  // Without answer_paths loom's runner still trusts no test file of the
  // agent's (only hidden ones), so the first two lose there too...
  v1::Task open_task = task;
  open_task.mutable_verification()->clear_answer_paths();
  EXPECT_EQ(Reward(open_task, attacks[0]), 0.0);
  EXPECT_EQ(Reward(open_task, attacks[1]), 0.0);
  // ...and win through a test command, which runs whatever the workspace holds.
  open_task.mutable_verification()->mutable_tests()->set_runner("");
  open_task.mutable_verification()->mutable_tests()->set_command("python3 -m unittest -q {test}");
  EXPECT_EQ(Reward(open_task, attacks[0]), 1.0);
  EXPECT_EQ(Reward(open_task, attacks[1]), 1.0);
  // With the fix, the planted files are ignored rather than breaking verification.
  EXPECT_EQ(Reward(task, std::string(kHonestFix) + " && " + attacks[1]), 1.0);
}

TEST_F(TamperTest, UserSiteAndTmpOfTheAgentDoNotReachVerification) {
  v1::Task task;  // no answer_paths: the agent's whole workspace is verified
  task.mutable_verification()->set_command("python3 -c 'raise SystemExit(1)'");
  const std::string plant =
      "d=$(python3 -m site --user-site) && mkdir -p $d && "
      "echo 'import os; os._exit(0)' > $d/usercustomize.py";
  // The plant works where the agent runs...
  Make();
  EXPECT_EQ(Run(plant + " && python3 -c 'raise SystemExit(1)'").exit_code, 0);
  // ...and not in verification.
  EXPECT_EQ(Reward(task, plant), 0.0);
  task.mutable_verification()->set_command("test ! -e /tmp/planted && test ! -e $HOME/planted");
  EXPECT_EQ(Reward(task, "touch /tmp/planted"), 1.0);
}

TEST_F(TamperTest, HiddenFilesWinOverTheAgentsAndStayHidden) {
  v1::Task task;
  (*task.mutable_verification()->mutable_files())["check.sh"] =
      "test \"$(cat answer.txt)\" = yes\n";
  task.mutable_verification()->set_command("bash check.sh");
  EXPECT_EQ(Reward(task, "test ! -e check.sh && echo yes > answer.txt"), 1.0);
  EXPECT_EQ(Reward(task, "echo no > answer.txt && echo 'exit 0' > check.sh"), 0.0);
}

TEST_F(TamperTest, RegexMustMatchTheWholeAnswer) {
  v1::Task task;
  task.mutable_verification()->mutable_output_regex()->set_regex("4[0-9]");
  EXPECT_EQ(Reward(task, "true", " 42\n"), 1.0);
  EXPECT_EQ(Reward(task, "true", "41 42 43 44 45 46 47 48 49"), 0.0);
  task.mutable_verification()->mutable_output_regex()->set_command("seq 40 49");
  EXPECT_EQ(Reward(task, "true"), 0.0);
  task.mutable_verification()->mutable_output_regex()->set_command("echo 42");
  EXPECT_EQ(Reward(task, "true"), 1.0);
}

// Independent measure: du, which also counts st_blocks and hard links once.
int64_t Du(const std::string& flags, const std::string& dir) {
  FILE* pipe = popen(("du -s " + flags + " " + dir).c_str(), "r");
  char line[256] = {};
  std::fgets(line, sizeof(line), pipe);
  pclose(pipe);
  int64_t value = -1;
  absl::SimpleAtoi(
      absl::StripSuffix(std::string(line).substr(0, std::string(line).find('\t')), "\n"), &value);
  return value;
}

TEST(UsageTest, DiskUsageAgreesWithDu) {
  std::string dir = testing::TempDir() + "/loom_usage_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  fs::create_directories(dir + "/a/b/c");
  std::ofstream(dir + "/a/one") << std::string(10000, 'x');
  std::ofstream(dir + "/a/b/c/two") << std::string(300000, 'y');
  fs::create_hard_link(dir + "/a/b/c/two", dir + "/a/two-again");
  fs::create_symlink("/usr", dir + "/usr-link");  // not followed
  {
    std::ofstream sparse(dir + "/sparse");
    sparse.seekp(50 << 20);
    sparse << 'z';
  }
  fs::create_directories(dir + "/locked/inner");
  std::ofstream(dir + "/locked/inner/f") << std::string(5000, 'q');
  const DiskUsage before_lock = MeasureDisk(dir);
  chmod((dir + "/locked").c_str(), 0);  // what a command may do to hide files
  const DiskUsage usage = MeasureDisk(dir);
  EXPECT_EQ(usage.bytes, Du("-B1", dir));
  EXPECT_EQ(usage.inodes, Du("--inodes", dir));
  EXPECT_EQ(usage.bytes, before_lock.bytes);
  EXPECT_EQ(usage.inodes, 11);
  EXPECT_TRUE(usage.unreadable.empty());
  EXPECT_LT(usage.bytes, 1 << 20) << "a sparse file counts what it holds";
  fs::remove_all(dir);
}

TEST(UsageTest, ProcessTreeHoldsWhatItsChildrenTouched) {
  ProcessSpec spec;
  spec.argv = {"/bin/bash", "-c",
               "python3 -c 'import time; x = b\"x\" * (200 << 20); print(\"ready\", flush=True); "
               "time.sleep(30)' | (read line; sleep 30)"};
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.timeout_s = 20;
  ProcessTreeUsage seen;
  spec.watch_interval_ms = 100;
  spec.watch = [&seen](int pid) {
    ProcessTreeUsage now = MeasureProcessTree(pid);
    if (now.resident_bytes > seen.resident_bytes) seen = now;
    return now.resident_bytes > (200LL << 20) ? "enough" : "";
  };
  auto result = RunProcess(spec);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->limit, "enough");
  EXPECT_FALSE(result->timed_out);
  // bash, python, the subshell and its sleep (the read may not have returned).
  EXPECT_GE(seen.processes, 3);
  EXPECT_LT(seen.resident_bytes, 300LL << 20);
  EXPECT_EQ(MeasureProcessTree(1 << 30).processes, 0) << "no such process";
}

}  // namespace
}  // namespace loom::sandbox
