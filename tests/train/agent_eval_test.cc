// `loom eval` on held-out agent tasks through the real binary: a tiny model,
// 2 real local workers, bubblewrap sandboxes and the built-in loop. The
// held-out file's verdicts are fixed by construction (a verification that
// always passes, one that never does, a setup that always fails), so every
// figure of the row is checked against a count by hand, whatever the
// untrained model writes.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace loom
