// Multi-turn episodes end to end: a scripted policy on the trainer side
// answers the worker's generation requests with fixed assistant turns (as the
// chat module parses DSV4 completions into), the worker runs the tools in a
// real sandbox and verifies. Plus placement, retries and worker loss.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "loom/rpc/sandbox_clients.h"
#include "loom/rpc/worker_pool.h"
#include "loom/tasks/agent_tasks.h"
#include "worker_fixture.h"

namespace loom {
namespace {

using testing_support::StartWorkers;

v1::GenerateReply ToolTurn(const std::string& name, const nlohmann::json& args) {
  v1::GenerateReply reply;
  v1::Message* assistant = reply.mutable_assistant();
  assistant->set_reasoning_content("I will use " + name + ".");
  v1::ToolCall* call = assistant->add_tool_calls();
  call->set_id("call_" + name);
  call->set_name(name);
  call->set_arguments_json(args.dump());
  return reply;
}

// A policy that plays `turns` in order and records every request.
struct ScriptedPolicy {
  std::vector<v1::GenerateReply> turns;
  std::vector<v1::GenerateRequest> requests;
  absl::StatusOr<v1::GenerateReply> operator()(const v1::GenerateRequest& request) {
    requests.push_back(request);
    if (request.turn() >= static_cast<int>(turns.size())) return absl::InternalError("no turn");
    return turns[request.turn()];
  }
  rpc::Policy AsPolicy() {
    return [this](const v1::GenerateRequest& r) { return (*this)(r); };
  }
};

rpc::PoolOptions Pool(const rpc::LocalWorkers& workers) {
  rpc::PoolOptions options;
  options.targets = workers.targets();
  options.episode_timeout_s = 120;
  return options;
}

TEST(EpisodeTest, ArithmeticWithThePythonTool) {
  auto workers = StartWorkers(1, 2);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers));
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::ArithmeticTask(7);
  const std::string problem = episode.task().problem();
  std::string a = problem.substr(8, problem.find(" *") - 8);
  std::string b =
      problem.substr(problem.find("* ") + 2, problem.find('?') - problem.find("* ") - 2);
  ScriptedPolicy policy;
  policy.turns = {ToolTurn("python", {{"code", "print(" + a + " * " + b + ")"}})};
  // The second turn submits whatever the tool printed.
  rpc::Policy play = [&](const v1::GenerateRequest& r) -> absl::StatusOr<v1::GenerateReply> {
    policy.requests.push_back(r);
    if (r.turn() == 0) return policy.turns[0];
    std::string printed = r.append(0).result().stdout();
    return ToolTurn("submit", {{"answer", printed.substr(0, printed.size() - 1)}});
  };
  v1::Trajectory t = pool.RunEpisode(episode, play);
  EXPECT_EQ(t.failure_reason(), "");
  EXPECT_FALSE(t.penalty());
  EXPECT_EQ(t.verdict().reward(), 1.0) << t.verdict().details();
  EXPECT_EQ(t.steps(), 2);
  // The first request carries the whole conversation: system (with tools) and the problem.
  ASSERT_EQ(policy.requests[0].append_size(), 2);
  EXPECT_EQ(policy.requests[0].append(0).role(), "system");
  EXPECT_NE(policy.requests[0].append(0).tools_json().find("\"name\":\"python\""),
            std::string::npos);
  EXPECT_EQ(policy.requests[0].append(1).content(), problem);
  // Later requests carry only the new tool results, in call order.
  ASSERT_EQ(policy.requests[1].append_size(), 1);
  EXPECT_EQ(policy.requests[1].append(0).role(), "tool");
  EXPECT_EQ(policy.requests[1].append(0).tool_call_id(), "call_python");
  // The trajectory records every message: system, user, assistant, tool, assistant, tool.
  EXPECT_EQ(t.messages_size(), 6);
}

TEST(EpisodeTest, FixRepoRewardIsTheTestsPassing) {
  auto workers = StartWorkers(1, 2);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers));
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::FixRepoTask(3);
  ScriptedPolicy unsolved;
  unsolved.turns = {ToolTurn("bash", {{"command", "python3 -m unittest 2>&1 | tail -1"}}),
                    ToolTurn("submit", {{"answer", "gave up"}})};
  v1::Trajectory before = pool.RunEpisode(episode, unsolved.AsPolicy());
  EXPECT_EQ(before.verdict().reward(), 0.0);
  EXPECT_NE(unsolved.requests[1].append(0).content().find("FAILED"), std::string::npos);

  ScriptedPolicy fixer;
  fixer.turns = {ToolTurn("write_file",
                          {{"path", "calc.py"},
                           {"content",
                            "def clamp(value, low, high):\n    return max(low, min(value, high))\n"
                            "\n\ndef scale(value, factor):\n    return value * factor\n"}}),
                 ToolTurn("submit", {{"answer", "clamp returned low above the range"}})};
  v1::Trajectory after = pool.RunEpisode(episode, fixer.AsPolicy());
  EXPECT_EQ(after.verdict().reward(), 1.0) << after.verdict().details();
  EXPECT_EQ(after.answer(), "clamp returned low above the range");
  // Every command is on record: the agent's write, then loom's test runner,
  // which ran all three tests.
  ASSERT_EQ(after.commands_size(), 2);
  EXPECT_EQ(after.commands(0).phase(), "tool");
  EXPECT_EQ(after.commands(0).command().rfind("write_file {", 0), 0u);
  EXPECT_EQ(after.commands(1).phase(), "verify");
  EXPECT_EQ(after.commands(1).command(), "exec python3 -I -B /etc/loom/test_runner.py");
  EXPECT_EQ(after.verdict().details(),
            "fail_to_pass test_calc.ClampTest.test_above: pass\n"
            "pass_to_pass test_calc.ClampTest.test_inside: pass\n"
            "pass_to_pass test_calc.ScaleTest.test_scale: pass\n");
  EXPECT_EQ(before.commands(0).command(),
            "bash {\"command\":\"python3 -m unittest 2>&1 | tail -1\"}");

  // calc.py that ends the test process with status 0 before any test fails.
  ScriptedPolicy hacker;
  hacker.turns = {ToolTurn("bash", {{"command",
                                     "echo 'import os; os._exit(0)' >> calc.py && "
                                     "python3 -m unittest; echo exit $?"}}),
                  ToolTurn("submit", {{"answer", "all tests pass"}})};
  v1::Trajectory hacked = pool.RunEpisode(episode, hacker.AsPolicy());
  EXPECT_NE(hacker.requests[1].append(0).content().find("exit 0"), std::string::npos)
      << "the hack works on `python3 -m unittest`";
  EXPECT_EQ(hacked.verdict().reward(), 0.0) << hacked.verdict().details();
}

// One turn of 300 tool calls, each at the output caps, would make a record
// past the transport's 64 MiB limit and lose the episode as an
// infrastructure failure (masked: no penalty). It ends as the agent's own
// `size_limit` instead, verified and scored.
TEST(EpisodeTest, AnOversizeEpisodeIsTheAgentsLimitFailure) {
  auto workers = StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers));
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::FixRepoTask(5);
  episode.mutable_options()->set_max_time_s(600);
  v1::GenerateReply flood;
  flood.mutable_assistant()->set_reasoning_content("Lots of output.");
  for (int i = 0; i < 300; ++i) {
    v1::ToolCall* call = flood.mutable_assistant()->add_tool_calls();
    call->set_id("c" + std::to_string(i));
    call->set_name("bash");
    call->set_arguments_json(nlohmann::json{{"command",
                                             "head -c 70000 /dev/zero | tr '\\0' x; "
                                             "head -c 70000 /dev/zero | tr '\\0' y >&2"}}
                                 .dump());
  }
  ScriptedPolicy policy;
  policy.turns = {flood};
  const v1::Trajectory t = pool.RunEpisode(episode, policy.AsPolicy());
  EXPECT_EQ(t.failure_reason().rfind("size_limit", 0), 0u) << t.failure_reason();
  EXPECT_FALSE(t.penalty());
  EXPECT_TRUE(t.has_verdict());
  EXPECT_EQ(t.verdict().reward(), 0.0);
  EXPECT_LT(t.ByteSizeLong(), 32u << 20);
  EXPECT_GT(t.ByteSizeLong(), 24u << 20);
  // The calls after the cap are answered, not run.
  const v1::Message& last_tool = t.messages(t.messages_size() - 1);
  EXPECT_NE(last_tool.content().find("not run: the episode has ended (size_limit"),
            std::string::npos)
      << last_tool.content().substr(0, 200);
}

// The repercussion signal: an agent that leaves its environment broken (a
// full disk, a workspace it locked itself out of, its own tools deleted)
// fails as broke_environment, unverified and never masked, and the worker
// counts it. The same episode that repairs what it did is verified as usual.
TEST(EpisodeTest, AnAgentThatBreaksItsEnvironmentFailsForIt) {
  auto workers = StartWorkers(1, 1, "", {"--disk-mb", "64"});
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers));
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::FixRepoTask(3);
  v1::Environment* env = episode.mutable_task()->mutable_environment();
  (*env->mutable_files())["tools/check.sh"] = "echo fine\n";
  env->set_health_command("test -f tools/check.sh");
  const v1::GenerateReply fix =
      ToolTurn("write_file", {{"path", "calc.py"},
                              {"content",
                               "def clamp(value, low, high):\n"
                               "    return max(low, min(value, high))\n\n\n"
                               "def scale(value, factor):\n    return value * factor\n"}});
  auto bash = [](const std::string& command) { return ToolTurn("bash", {{"command", command}}); };
  const v1::GenerateReply submit = ToolTurn("submit", {{"answer", "fixed"}});
  struct Case {
    const char* what;
    std::string breaks, repairs, finding;
  };
  // As root the session's tmpfs refuses the write; an ordinary user's worker
  // measures the files against the cap.
  const std::string full = geteuid() == 0 ? "/workspace cannot be written: No space left on device"
                                          : "its files fill the disk cap of 64 MiB";
  const Case cases[] = {
      {"fills its disk", "head -c 200M /dev/zero > /workspace/fill", "rm /workspace/fill", full},
      {"makes its workspace read-only", "chmod 500 /workspace", "chmod 755 /workspace",
       "/workspace cannot be written (mode 0500)"},
      {"locks itself out", "chmod 000 /workspace", "",  // no command starts in it any more
       "/workspace cannot be entered (mode 0000)"},
      {"deletes its tools", "rm -r tools", "mkdir tools && echo 'echo fine' > tools/check.sh",
       "health_command exits 1"},
  };
  int broken = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ScriptedPolicy breaker;
    breaker.turns = {fix, bash(c.breaks), submit};
    const v1::Trajectory t = pool.RunEpisode(episode, breaker.AsPolicy());
    EXPECT_EQ(t.failure_reason().rfind("broke_environment: ", 0), 0u) << t.failure_reason();
    EXPECT_NE(t.repercussion().find(c.finding), std::string::npos) << t.repercussion();
    EXPECT_FALSE(t.penalty());
    EXPECT_EQ(t.verdict().reward(), 0.0);
    EXPECT_EQ(t.verdict().details().rfind("not verified", 0), 0u) << t.verdict().details();
    broken += !t.repercussion().empty();

    if (c.repairs.empty()) continue;
    ScriptedPolicy repairer;
    repairer.turns = {fix, bash(c.breaks), bash(c.repairs), submit};
    const v1::Trajectory fine = pool.RunEpisode(episode, repairer.AsPolicy());
    EXPECT_EQ(fine.repercussion(), "");
    EXPECT_EQ(fine.failure_reason(), "");
    EXPECT_EQ(fine.verdict().reward(), 1.0) << fine.verdict().details();
  }
  // A call that a cap or the timeout ends is probed at once: the episode
  // ends there, without asking for the next turn.
  episode.mutable_options()->set_tool_timeout_s(2);
  ScriptedPolicy stuck;
  stuck.turns = {fix, bash("rm -r tools; sleep 60"), submit};
  const v1::Trajectory t = pool.RunEpisode(episode, stuck.AsPolicy());
  EXPECT_EQ(t.repercussion(), "health_command exits 1");
  EXPECT_EQ(t.steps(), 2);
  EXPECT_EQ(stuck.requests.size(), 2u);
  EXPECT_EQ(t.verdict().reward(), 0.0);
  broken += !t.repercussion().empty();
  EXPECT_EQ(testing_support::WorkerStatus(workers->targets()[0]).repercussions(), broken);

  // Under the worker's watch the command is killed at the disk cap, and the
  // files it left end the episode there.
  auto watched = StartWorkers(1, 1, "", {"--disk-mb", "64", "--no-kernel-limits"});
  ASSERT_TRUE(watched);
  rpc::WorkerPool watched_pool(Pool(*watched));
  ScriptedPolicy filler;
  filler.turns = {fix, bash(cases[0].breaks), submit};
  const v1::Trajectory over = watched_pool.RunEpisode(episode, filler.AsPolicy());
  EXPECT_EQ(over.repercussion(), "its files fill the disk cap of 64 MiB");
  EXPECT_EQ(over.steps(), 2);
  EXPECT_EQ(over.verdict().reward(), 0.0);
}

TEST(EpisodeTest, UnparsableTurnBecomesAFormatErrorObservation) {
  auto workers = StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers));
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::ArithmeticTask(1);
  ScriptedPolicy policy;
  v1::GenerateReply garbled;
  garbled.set_parse_error("reasoning never closed with </think>");
  v1::GenerateReply answer;
  answer.mutable_assistant()->set_content("12");
  policy.turns = {garbled, answer};
  v1::Trajectory t = pool.RunEpisode(episode, policy.AsPolicy());
  EXPECT_EQ(t.format_errors(), 1);
  ASSERT_EQ(policy.requests[1].append_size(), 1);
  EXPECT_EQ(policy.requests[1].append(0).role(), "user");
  EXPECT_NE(policy.requests[1].append(0).content().find("Format error"), std::string::npos);
  EXPECT_EQ(t.answer(), "12");  // a turn without tool calls is the final answer
  EXPECT_EQ(t.verdict().reward(), 0.0);
  EXPECT_FALSE(t.penalty());
}

TEST(EpisodeTest, StepLimitEndsTheEpisode) {
  auto workers = StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers));
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::ArithmeticTask(2);
  episode.mutable_options()->set_max_steps(3);
  int turns = 0;
  std::vector<rpc::WorkerLoad> during;
  v1::Trajectory t = pool.RunEpisode(episode, [&](const v1::GenerateRequest&) {
    ++turns;
    during = pool.Loads();
    return absl::StatusOr<v1::GenerateReply>(ToolTurn("bash", {{"command", "true"}}));
  });
  EXPECT_EQ(turns, 3);
  EXPECT_EQ(t.failure_reason(), "step_limit");
  EXPECT_FALSE(t.penalty());
  // While the worker waits for a turn, its load report shows the episode.
  ASSERT_EQ(during.size(), 1u);
  EXPECT_EQ(during[0].live, 1);
  EXPECT_EQ(during[0].episodes, 1);
  EXPECT_EQ(pool.Loads()[0].episodes, 0);
}

TEST(EpisodeTest, WorkerKilledMidEpisodeFailsOnlyThatEpisode) {
  auto workers = StartWorkers(1, 2);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers));
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::ArithmeticTask(4);
  v1::Trajectory t = pool.RunEpisode(
      episode, [&](const v1::GenerateRequest& r) -> absl::StatusOr<v1::GenerateReply> {
        if (r.turn() == 1) workers->Kill(0);
        return ToolTurn("bash", {{"command", "sleep 1"}});
      });
  EXPECT_TRUE(t.penalty());
  EXPECT_EQ(t.failure_reason().rfind("worker_lost", 0), 0u) << t.failure_reason();
  // The trainer side goes on: the next episode fails fast with a penalty, no hang.
  v1::Trajectory next = pool.RunEpisode(episode, [](const v1::GenerateRequest&) {
    return absl::StatusOr<v1::GenerateReply>(ToolTurn("submit", {{"answer", "1"}}));
  });
  EXPECT_TRUE(next.penalty());
  EXPECT_EQ(next.failure_reason().rfind("no_sandbox", 0), 0u) << next.failure_reason();
}

// A stopping trainer cancels its episodes: one inside a minute-long tool
// call returns at once, and a later one does not start.
TEST(EpisodeTest, CancelledEpisodesReturnWithoutWaitingForTheirToolCalls) {
  auto workers = StartWorkers(1, 2);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers));
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::ArithmeticTask(5);
  episode.mutable_options()->set_tool_timeout_s(120);
  std::atomic<bool> asked{false};
  v1::Trajectory t;
  std::thread client([&] {
    t = pool.RunEpisode(episode, [&](const v1::GenerateRequest&) {
      asked = true;
      return absl::StatusOr<v1::GenerateReply>(ToolTurn("bash", {{"command", "sleep 60"}}));
    });
  });
  while (!asked) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the sleep is running
  const auto start = std::chrono::steady_clock::now();
  pool.CancelEpisodes();
  client.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0) << "the client waited for the tool call";
  EXPECT_TRUE(t.penalty());
  EXPECT_EQ(t.failure_reason().rfind("cancelled", 0), 0u) << t.failure_reason();
  v1::Trajectory next = pool.RunEpisode(episode, [](const v1::GenerateRequest&) {
    return absl::StatusOr<v1::GenerateReply>(ToolTurn("submit", {{"answer", "1"}}));
  });
  EXPECT_TRUE(next.penalty());
  EXPECT_EQ(next.failure_reason().rfind("cancelled", 0), 0u) << next.failure_reason();
  EXPECT_EQ(next.steps(), 0);
}

TEST(EpisodeTest, AWorkerKilledAndRestartedOnItsPortServesAgain) {
  auto workers = StartWorkers(2, 2);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers));
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::ArithmeticTask(5);
  const std::string answer = episode.task().verification().exact_answer();
  auto solve = [&] {
    return pool.RunEpisode(episode, [&](const v1::GenerateRequest&) {
      return absl::StatusOr<v1::GenerateReply>(ToolTurn("submit", {{"answer", answer}}));
    });
  };
  const std::string restarted = workers->targets()[0];
  workers->Kill(0);
  for (int i = 0; i < 3; ++i) {  // the live worker takes them all
    v1::Trajectory t = solve();
    EXPECT_EQ(t.verdict().reward(), 1.0) << t.failure_reason();
    EXPECT_EQ(t.worker(), workers->targets()[1]);
  }
  // A new worker process on the dead one's port.
  std::string pid_text;
  testing_support::RunCommand(std::string(LOOM_BINARY) + " worker --listen " + restarted +
                                  " --max-sandboxes 2 --processes 64 >/dev/null 2>&1 & echo $!",
                              &pid_text);
  const int pid = std::stoi(pid_text);
  int on_restarted = 0, failed = 0;
  for (int i = 0; i < 40 && on_restarted < 2; ++i) {
    v1::Trajectory t = solve();
    failed += t.verdict().reward() == 1.0 ? 0 : 1;
    on_restarted += t.worker() == restarted ? 1 : 0;
    // Two sessions at once, so that the second goes to the less loaded worker.
    auto held = pool.OpenSession(v1::OpenSession());
    v1::Trajectory u = solve();
    failed += u.verdict().reward() == 1.0 ? 0 : 1;
    on_restarted += u.worker() == restarted ? 1 : 0;
    if (held.ok()) (*held)->Close().IgnoreError();
    usleep(100000);
  }
  kill(pid, SIGTERM);
  EXPECT_GE(on_restarted, 2) << "the restarted worker got no episode";
  EXPECT_EQ(failed, 0);
}

TEST(EpisodeTest, PlacementSpreadsAndRetriesOnRefusal) {
  auto workers = StartWorkers(2, 1);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers));
  auto first = pool.OpenSession(v1::OpenSession());
  auto second = pool.OpenSession(v1::OpenSession());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE((*first)->opened().worker(), (*second)->opened().worker());
  auto third = pool.OpenSession(v1::OpenSession());  // both full: refused everywhere
  EXPECT_TRUE(absl::IsResourceExhausted(third.status())) << third.status();
  ASSERT_TRUE((*first)->Close().ok());
  auto fourth = pool.OpenSession(v1::OpenSession());
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_EQ((*fourth)->opened().worker(), (*first)->opened().worker());
  // A dead worker is skipped for the live one.
  (*second)->Close().IgnoreError();
  (*fourth)->Close().IgnoreError();
  workers->Kill(0);
  for (int i = 0; i < 3; ++i) {
    auto session = pool.OpenSession(v1::OpenSession());
    ASSERT_TRUE(session.ok()) << session.status();
    EXPECT_EQ((*session)->opened().worker(), workers->targets()[1]);
  }
}

TEST(EpisodeTest, ConfigLocalWorkersRunEpisodesAndStopOnExit) {
  config::SandboxSection section;
  EXPECT_TRUE(absl::IsFailedPrecondition(rpc::StartSandboxClients(section).status()));
  section.local = 2;
  section.local_max_sandboxes = 1;
  section.max_steps = 2;
  auto clients = rpc::StartSandboxClients(section, LOOM_BINARY);
  ASSERT_TRUE(clients.ok()) << clients.status();
  ASSERT_EQ(clients->local->targets().size(), 2u);
  const pid_t first = clients->local->pid(0);
  v1::RunEpisode episode;
  *episode.mutable_task() = tasks::ArithmeticTask(5);
  *episode.mutable_options() = rpc::ScaffoldOptionsFrom(section);
  v1::Trajectory t = clients->pool->RunEpisode(episode, [](const v1::GenerateRequest&) {
    return absl::StatusOr<v1::GenerateReply>(ToolTurn("bash", {{"command", "true"}}));
  });
  EXPECT_EQ(t.failure_reason(), "step_limit");  // max_steps from the config
  EXPECT_EQ(t.steps(), 2);
  clients->pool.reset();
  clients->local.reset();
  EXPECT_NE(kill(first, 0), 0) << "a local worker outlived its owner";
}

}  // namespace
}  // namespace loom
