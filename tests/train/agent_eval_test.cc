// `loom eval` on held-out agent tasks through the real binary: a tiny model,
// 2 real local workers, bubblewrap sandboxes and the built-in loop. The
// held-out file's verdicts are fixed by construction (a verification that
// always passes, one that never does, a setup that always fails), so every
// figure of the row is checked against a count by hand, whatever the
// untrained model writes.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "testing/harness_probe.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using Json = nlohmann::json;
using testing::RunLoom;
using testing::TempDir;

// A task of the shipped held-out set with its verification replaced.
Json Task(const std::string& id, const Json& verification, const std::string& setup = "") {
  std::ifstream in(LOOM_SOURCE_DIR "/configs/tasks/code-eval.jsonl");
  std::string line;
  std::getline(in, line);
  Json task = Json::parse(line);
  task["id"] = id;
  task["verification"] = verification;
  if (!setup.empty()) task["environment"]["setup"] = setup;
  return task;
}

TEST(AgentEvalTest, HeldOutTasksRunAsEpisodesAndEveryFigureAddsUp) {
  TempDir dir;
  const std::string model = dir / "model";
  auto made = RunLoom("init-model --arch llama --out " + model +
                      " --seed 3 --set hidden_size=64 --set num_hidden_layers=2"
                      " --set max_position_embeddings=4096");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string held_out =
      dir.Write("eval.jsonl", Task("always", {{"command", "true"}}).dump() + "\n" +
                                  Task("never", {{"command", "false"}}).dump() + "\n" +
                                  Task("broken", {{"command", "true"}}, "exit 4").dump() + "\n");
  const std::string args =
      "eval --json --threads 1 --samples 2 --efforts 50,100 --model " + model +
      " --config " LOOM_SOURCE_DIR "/configs/code.yaml --set model.path=" + model +
      " --set tasks.datasets[0].path=" LOOM_SOURCE_DIR
      "/configs/tasks/code-train.jsonl --set tasks.datasets[0].eval_path=" +
      held_out + " --set sandbox.max_turn_tokens=32";
  const auto run = RunLoom(args);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json json = Json::parse(run.out.substr(run.out.rfind("\n{") + 1));
  EXPECT_TRUE(json["results"].empty());  // no single-turn dataset
  const Json& rows = json["agent_results"];
  ASSERT_EQ(rows.size(), 2u) << json.dump(1);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Json& row = rows[i];
    EXPECT_EQ(row["dataset"], "code");
    EXPECT_EQ(row["scaffold"], "builtin");
    EXPECT_EQ(row["effort"], i == 0 ? 50 : 100);
    EXPECT_EQ(row["tasks"], 3);  // the held-out file's, not the 200 training tasks
    EXPECT_EQ(row["episodes"], 6);
    // The failed setup's two episodes are counted apart, by cause...
    EXPECT_EQ(row["failures"], 2);
    EXPECT_EQ(row["failures_by_cause"], Json({{"setup_failed", 2}}));
    // ...and left out: 2 passes of 4 episodes; per task 1 and 0, whose
    // standard error is sd / √2 = 0.7071 / 1.4142; one task of two solved.
    EXPECT_DOUBLE_EQ(row["pass@1"].get<double>(), 0.5);
    EXPECT_NEAR(row["pass@1_stderr"].get<double>(), 0.5, 1e-12);
    EXPECT_DOUBLE_EQ(row["pass@K"].get<double>(), 0.5);
    EXPECT_GE(row["mean_turns"].get<double>(), 1.0);
    EXPECT_LE(row["mean_turns"].get<double>(), 3.0);  // configs/code.yaml: max_steps 3
    EXPECT_GT(row["mean_tokens"].get<double>(), 0.0);
    EXPECT_GE(row["format_error_rate"].get<double>(), 0.0);
    EXPECT_LE(row["format_error_rate"].get<double>(), 1.0);
  }
  EXPECT_NE(run.out.find("setup_failed:2"), std::string::npos) << run.out;
}

// The held-out file of the test above, and `loom eval` on it with `flags`;
// the JSON's agent rows.
class HarnessEvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto made = RunLoom("init-model --arch llama --out " + model_ +
                        " --seed 3 --set hidden_size=64 --set num_hidden_layers=2"
                        " --set max_position_embeddings=16384");
    ASSERT_EQ(made.exit_code, 0) << made.err;
    std::string lines;
    for (Json task : {Task("always", {{"command", "true"}}), Task("never", {{"command", "false"}}),
                      Task("broken", {{"command", "true"}}, "exit 4")}) {
      task["environment"]["files"]["probe.py"] = testing::kHarnessProbe;
      lines += task.dump() + "\n";
    }
    held_out_ = dir_.Write("eval.jsonl", lines);
  }

  // `max_time_s`: each episode's limit, which a hanging harness always
  // reaches.
  Json Rows(const std::string& flags, int max_time_s = 5) {
    const auto run =
        RunLoom("eval --json --threads 1 --model " + model_ +
                " --config " LOOM_SOURCE_DIR "/configs/code.yaml --set model.path=" + model_ +
                " --set tasks.datasets[0].path=" LOOM_SOURCE_DIR
                "/configs/tasks/code-train.jsonl --set tasks.datasets[0].eval_path=" +
                held_out_ +
                " --set sandbox.harness_dir=" LOOM_SOURCE_DIR
                "/third_party/npm"
                " --set sandbox.max_turn_tokens=16 --set sandbox.max_time_s=" +
                std::to_string(max_time_s) + " " + flags);
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    const size_t last = run.out.rfind("\n{");
    if (last == std::string::npos) return Json::array();
    return Json::parse(run.out.substr(last + 1))["agent_results"];
  }

  TempDir dir_;
  const std::string model_ = dir_ / "model";
  std::string held_out_;
};

// Harnesses given as commands, one per way a harness ends: each episode is
// verified afterwards on the workspace it left (the verdicts are fixed by
// construction: always 1, never 0), or counted apart by cause.
TEST_F(HarnessEvalTest, HarnessesThatExitHangFloodOrCrashAreVerifiedOrCountedApart) {
  const Json rows = Rows(
      "--scaffolds quick,hang,flood,crash,missing --harness 'quick=echo done' "
      "--harness 'hang=sleep 600' "
      "--harness 'flood=head -c 30000000 /dev/zero | tr \"\\0\" x' "
      "--harness 'crash=kill -9 $$' --harness 'missing=/opt/no/such/harness'");
  ASSERT_EQ(rows.size(), 5u) << rows.dump(1);
  std::map<std::string, Json> by;
  for (const Json& row : rows) by[row["scaffold"]] = row;
  for (const char* ran : {"quick", "hang", "flood"}) {
    const Json& row = by[ran];
    EXPECT_EQ(row["episodes"], 3) << row.dump();
    EXPECT_EQ(row["failures_by_cause"], Json({{"setup_failed", 1}})) << row.dump();
    EXPECT_DOUBLE_EQ(row["pass@1"].get<double>(), 0.5) << row.dump();
    EXPECT_DOUBLE_EQ(row["pass@K"].get<double>(), 0.5) << row.dump();
  }
  EXPECT_EQ(by["quick"]["mean_turns"], 0.0);
  EXPECT_EQ(by["crash"]["failures_by_cause"], Json({{"harness_crashed", 2}, {"setup_failed", 1}}));
  EXPECT_EQ(by["missing"]["failures_by_cause"],
            Json({{"harness_failed_to_start", 2}, {"setup_failed", 1}}));
  for (const char* failed : {"crash", "missing"}) {
    EXPECT_EQ(by[failed]["failures"], 3);
    EXPECT_EQ(by[failed]["pass@1"], 0.0);  // nothing left to count
  }
}

// A probe calls the endpoint once per episode, capped at the run's turn
// length. Its own run, with a time limit a loaded machine cannot reach
// before the call (the probe exits once it is answered).
TEST_F(HarnessEvalTest, ProbeCallsTheEndpointOncePerEpisode) {
  const Json rows =
      Rows("--scaffolds probe --harness 'probe=PROBE_MAX_TOKENS=500 python3 probe.py'",
           /*max_time_s=*/120);
  ASSERT_EQ(rows.size(), 1u) << rows.dump(1);
  const Json& row = rows[0];
  EXPECT_EQ(row["episodes"], 3) << row.dump();
  EXPECT_EQ(row["failures_by_cause"], Json({{"setup_failed", 1}})) << row.dump();
  EXPECT_DOUBLE_EQ(row["pass@1"].get<double>(), 0.5) << row.dump();
  EXPECT_EQ(row["mean_turns"], 1.0) << row.dump();  // one call per episode
  EXPECT_GT(row["mean_tokens"].get<double>(), 0.0);
  EXPECT_LE(row["mean_tokens"].get<double>(), 16.0);  // sandbox.max_turn_tokens
}

// Pi, from npm, as the episode's main process in each sandbox: it runs the
// held-out task through the endpoint (its calls counted, each capped at the
// run's turn length) and the worker verifies what it left. Pi exits once its
// calls are answered, so its limit is one a loaded machine cannot reach.
TEST_F(HarnessEvalTest, PiRunsHeldOutTasksThroughTheEndpoint) {
  if (!std::filesystem::exists(LOOM_SOURCE_DIR "/third_party/npm/node_modules/.bin/pi")) {
    GTEST_SKIP() << "Pi is not installed: run scripts/setup.sh";
  }
  const Json rows = Rows("--scaffolds pi", /*max_time_s=*/120);
  ASSERT_EQ(rows.size(), 1u) << rows.dump(1);
  const Json& row = rows[0];
  EXPECT_EQ(row["scaffold"], "pi");
  EXPECT_EQ(row["episodes"], 3);
  EXPECT_EQ(row["failures_by_cause"], Json({{"setup_failed", 1}})) << row.dump();
  EXPECT_DOUBLE_EQ(row["pass@1"].get<double>(), 0.5);
  EXPECT_GE(row["mean_turns"].get<double>(), 1.0);
  EXPECT_GT(row["mean_tokens"].get<double>(), 0.0);
  EXPECT_LE(row["mean_tokens"].get<double>(), 16.0 * row["mean_turns"].get<double>());
}

// `loom tasks calibrate` on the held-out file as a training file: the task
// that always passes is estimated 1, the one that never does 0, and the one
// whose setup fails is unknown (its samples are infrastructure failures).
// The band keeps the first alone, tagged with its estimate.
TEST_F(HarnessEvalTest, CalibrateKeepsTheTasksInTheBandTaggedWithTheirEstimate) {
  const std::string out = dir_ / "calibrated";
  const auto run =
      RunLoom("tasks calibrate --threads 1 --model " + model_ +
              " --config " LOOM_SOURCE_DIR "/configs/code.yaml --set model.path=" + model_ +
              " --set tasks.datasets[0].path=" + held_out_ +
              " --set sandbox.max_turn_tokens=16"
              " --set sandbox.max_steps=1 --samples 2 --band 0.5,1 --out " +
              out + " --ledger " + (dir_ / "ledger.sqlite"));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("code: 3 tasks, 1 kept with pass rate in [0.50, 1.00] (2 samples each), 1 "
                         "unknown"),
            std::string::npos)
      << run.out;
  std::map<std::string, Json> estimates;
  std::ifstream in(out + "/code.calibration.jsonl");
  for (std::string line; std::getline(in, line);) {
    const Json e = Json::parse(line);
    estimates[e["id"]] = e;
  }
  ASSERT_EQ(estimates.size(), 3u);
  EXPECT_EQ(estimates["always"]["pass_rate"], 1.0);
  EXPECT_EQ(estimates["always"]["samples"], 2);
  EXPECT_EQ(estimates["always"]["kept"], true);
  EXPECT_EQ(estimates["never"]["pass_rate"], 0.0);
  EXPECT_EQ(estimates["never"]["kept"], false);
  EXPECT_TRUE(estimates["broken"]["pass_rate"].is_null());
  std::ifstream kept(out + "/code.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(kept, line));
  const Json task = Json::parse(line);
  EXPECT_EQ(task["id"], "always");
  EXPECT_EQ(task["tags"].back(), "pass_rate:1.000");
  EXPECT_FALSE(std::getline(kept, line)) << "only one task kept";
  // The kept file is a task file loom reads back.
  EXPECT_EQ(RunLoom("tasks dedup " + out + "/code.jsonl").exit_code, 0);

  // A dataset that is not a file is refused by name.
  const auto generator = RunLoom(
      "tasks calibrate --model " + model_ +
      " --config " LOOM_SOURCE_DIR "/configs/quickstart.yaml --datasets arithmetic --out " + out);
  EXPECT_EQ(generator.exit_code, 2) << generator.err;
  EXPECT_NE(generator.err.find("is not a file"), std::string::npos) << generator.err;
}

}  // namespace
}  // namespace loom
