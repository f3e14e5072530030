// `loom eval` through the real binary on a small model: one row per dataset ×
// effort (tiers accepted), the JSON line's fields, K samples (pass@K is at
// least pass@1, and greedy K = 1 gives pass@K = pass@1), and clear errors for
// bad flags; `loom generate` takes the same tiers. (train_e2e_test checks
// `loom eval` against a training run's own evaluation.)

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::RunLoom;
using testing::TempDir;

class EvalCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto made = RunLoom("init-model --arch qwen3 --out " + model_ +
                        " --seed 3 --set hidden_size=64 --set num_hidden_layers=2");
    ASSERT_EQ(made.exit_code, 0) << made.err;
    config_ = dir_.Write(
        "eval.yaml", "base: " LOOM_SOURCE_DIR
                     "/configs/quickstart.yaml\n"
                     "model: {path: " +
                         model_ +
                         "}\n"
                         "rollout: {max_new_tokens: 24}\n"
                         "effort: {levels: [25, 100], samples_per_level: [2], in_prompt: true}\n"
                         "tasks:\n  datasets:\n"
                         "    - {name: add, kind: arithmetic, max_difficulty: 1, eval_size: 6}\n"
                         "    - {name: sort, kind: sort, max_difficulty: 1, eval_size: 5}\n");
  }

  nlohmann::json Results(const std::string& flags) {
    auto run =
        RunLoom("eval --model " + model_ + " --config " + config_ + " --threads 1 --json " + flags);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    const std::string last = run.out.substr(run.out.rfind('{', run.out.rfind("\"results\"")));
    return nlohmann::json::parse(last)["results"];
  }

  // A row without its change from the next lower effort, which depends on
  // what else was evaluated.
  static nlohmann::json Cell(nlohmann::json row) {
    row.erase("pass@1_change");
    return row;
  }

  TempDir dir_;
  const std::string model_ = dir_ / "model";
  std::string config_;
};

TEST_F(EvalCliTest, ARowPerDatasetAndEffortWithTiers) {
  const nlohmann::json results = Results("--efforts low,max,60 --datasets sort,add");
  ASSERT_EQ(results.size(), 6u);
  const std::vector<std::pair<std::string, int>> expected = {
      {"add", 50}, {"add", 60}, {"add", 100}, {"sort", 50}, {"sort", 60}, {"sort", 100}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const nlohmann::json& r = results[i];
    EXPECT_EQ(r["dataset"], expected[i].first);
    EXPECT_EQ(r["effort"], expected[i].second);
    EXPECT_EQ(r["problems"], expected[i].first == "add" ? 6 : 5);
    EXPECT_DOUBLE_EQ(r["pass@K"].get<double>(), r["pass@1"].get<double>()) << "greedy, K = 1";
    EXPECT_LE(r["mean_reasoning_tokens"].get<double>(), r["mean_response_tokens"].get<double>());
    EXPECT_LE(r["mean_response_tokens"].get<double>(), 24.0);
    EXPECT_GE(r["parse_rate"].get<double>(), 0.0);
    EXPECT_LE(r["parse_rate"].get<double>(), 1.0);
    // Greedy with 0/1 rewards: the standard error's closed form.
    const double p = r["pass@1"], n = r["problems"];
    EXPECT_NEAR(r["pass@1_stderr"].get<double>(), std::sqrt(p * (1 - p) / (n - 1)), 1e-12) << r;
  }
  // Without --efforts: the config's training levels.
  const nlohmann::json levels = Results("--datasets add");
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(levels[0]["effort"], 25);
  EXPECT_EQ(levels[1]["effort"], 100);
  // Greedy is deterministic: the same cell twice is the same numbers.
  EXPECT_EQ(Cell(levels[1]), Cell(results[2]));
}

// A cell's samples are seeded by its dataset, effort and problem, not by its
// place among the cells evaluated with it: the same cell, sampled, gives the
// same numbers whatever else is evaluated.
// --save appends the JSON line, with the model and config, to the run
// directory's evaluations.jsonl (for `loom report`), once per evaluation.
TEST_F(EvalCliTest, SaveAppendsTheResultsToTheRunDirectory) {
  const std::string run_dir = dir_ / "run";
  const nlohmann::json first = Results("--efforts 100 --save " + run_dir);
  Results("--efforts 25 --save " + run_dir);
  std::istringstream lines(testing::ReadAll(run_dir + "/evaluations.jsonl"));
  std::vector<nlohmann::json> saved;
  for (std::string line; std::getline(lines, line);) saved.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0]["results"], first);
  EXPECT_EQ(saved[0]["model"], model_);
  EXPECT_EQ(saved[0]["config"], config_);
  EXPECT_EQ(saved[1]["results"][0]["effort"], 25);
}

TEST_F(EvalCliTest, ACellIsTheSameWhateverIsEvaluatedWithIt) {
  const std::string sampled = "--samples 4 --temperature 1.5 ";
  const nlohmann::json alone = Results(sampled + "--datasets add --efforts 60");
  const nlohmann::json together = Results(sampled + "--efforts 25,60,100,60");
  ASSERT_EQ(alone.size(), 1u);
  ASSERT_EQ(together.size(), 6u) << "60 twice is one cell";
  EXPECT_EQ(together[1]["dataset"], "add");
  EXPECT_EQ(together[1]["effort"], 60);
  EXPECT_EQ(Cell(together[1]), alone[0]);
  // And the other dataset's cells, evaluated without the first dataset.
  const nlohmann::json sort = Results(sampled + "--datasets sort --efforts 25,60,100");
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(sort[i], together[3 + i]) << i;
}

// Each effort after a dataset's lowest carries the change of pass@1 from the
// next lower one, paired by problem: its mean is the difference of the two
// pass@1s; the lowest carries none.
TEST_F(EvalCliTest, ChangesAreAgainstTheNextLowerEffort) {
  const nlohmann::json results = Results("--samples 4 --temperature 1.5 --efforts 25,60,100");
  ASSERT_EQ(results.size(), 6u);
  for (size_t i = 0; i < results.size(); ++i) {
    const nlohmann::json& r = results[i];
    EXPECT_GE(r["pass@1_stderr"].get<double>(), 0.0);
    if (i % 3 == 0) {
      EXPECT_FALSE(r.contains("pass@1_change")) << r;
      continue;
    }
    const nlohmann::json& lower = results[i - 1];
    ASSERT_TRUE(r.contains("pass@1_change")) << r;
    EXPECT_EQ(r["pass@1_change"]["from_effort"], lower["effort"]);
    EXPECT_NEAR(r["pass@1_change"]["diff"].get<double>(),
                r["pass@1"].get<double>() - lower["pass@1"].get<double>(), 1e-12);
    EXPECT_GE(r["pass@1_change"]["stderr"].get<double>(), 0.0);
  }
}

TEST_F(EvalCliTest, KSamplesGivePassAtKAtLeastPassAtOne) {
  const nlohmann::json results = Results("--samples 4 --temperature 1.5 --efforts 100");
  ASSERT_EQ(results.size(), 2u);
  for (const nlohmann::json& r : results) {
    EXPECT_GE(r["pass@K"].get<double>(), r["pass@1"].get<double>() - 1e-12) << r;
    EXPECT_LE(r["pass@K"].get<double>(), 1.0);
  }
}

// --ledger: every evaluated sample is an attempt (11 problems × 4 samples),
// and the ledger's pass rate per dataset is the table's pass@1.
TEST_F(EvalCliTest, LedgerReceivesEverySampleAndAgreesWithTheTable) {
  const std::string ledger = dir_ / "ledger.sqlite";
  const nlohmann::json results =
      Results("--samples 4 --temperature 1.5 --efforts 100 --ledger " + ledger);
  auto stats = RunLoom("tasks stats --json " + ledger);
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  const nlohmann::json ledger_stats =
      nlohmann::json::parse(stats.out.substr(stats.out.rfind("\n{") + 1));
  ASSERT_EQ(ledger_stats["datasets"].size(), 2u);
  for (const nlohmann::json& d : ledger_stats["datasets"]) {
    const nlohmann::json& row = results[d["dataset"] == "add" ? 0 : 1];
    ASSERT_EQ(row["dataset"], d["dataset"]);
    EXPECT_EQ(d["by_split"]["eval"]["attempts"], row["problems"].get<int>() * 4) << d.dump();
    EXPECT_NEAR(d["pass_rate"].get<double>(), row["pass@1"].get<double>(), 1e-12) << d.dump();
    EXPECT_EQ(d["tasks"], row["problems"]);
  }
  // A ledger that cannot be opened stops the evaluation before it runs.
  const std::string corrupt = dir_.Write("corrupt.sqlite", std::string(8192, 'x'));
  auto refused =
      RunLoom("eval --model " + model_ + " --config " + config_ + " --ledger " + corrupt);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find(corrupt), std::string::npos) << refused.err;
}

// `loom tasks calibrate` on a single-turn file: every line asked K times;
// with the band [0, 1] the kept file is the input, line for line.
TEST_F(EvalCliTest, CalibrateAsksEveryLineOfASingleTurnFile) {
  std::string lines;
  for (int i = 1; i <= 3; ++i) {
    lines +=
        nlohmann::json({{"messages", {{{"role", "user"}, {"content", std::to_string(i) + "+1"}}}},
                        {"answer", std::to_string(i + 1)}})
            .dump() +
        "\n";
  }
  const std::string file = dir_.Write("qa.jsonl", lines);
  const std::string config = dir_.Write(
      "qa.yaml", "base: " + config_ +
                     "\ntasks:\n  datasets:\n    - {name: qa, kind: jsonl, path: " + file + "}\n");
  const std::string out = dir_ / "calibrated";
  const auto run = RunLoom("tasks calibrate --threads 1 --model " + model_ + " --config " + config +
                           " --samples 3 --band 0,1 --out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(testing::ReadAll(out + "/qa.jsonl"), lines);
  std::ifstream in(out + "/qa.calibration.jsonl");
  int tasks = 0;
  for (std::string line; std::getline(in, line); ++tasks) {
    const nlohmann::json e = nlohmann::json::parse(line);
    EXPECT_EQ(e["samples"], 3) << line;
    EXPECT_EQ(e["source"], file + ":" + std::to_string(tasks + 1)) << line;
    const double rate = e["pass_rate"];
    EXPECT_TRUE(rate == 0 || rate == 1.0 / 3 || rate == 2.0 / 3 || rate == 1) << line;
  }
  EXPECT_EQ(tasks, 3);
}

// `loom generate --effort` takes the same tiers: a tier is its number.
TEST_F(EvalCliTest, GenerateTakesTiersAsTheirNumbers) {
  const std::string base =
      "generate --model " + model_ +
      " --prompt 'What is 2 + 3?' --temperature 0 --max-new-tokens 12 --effort ";
  for (const auto& [tier, b] :
       {std::pair<const char*, const char*>{"low", "50"}, {"high", "75"}, {"max", "100"}}) {
    auto named = RunLoom(base + tier);
    auto numbered = RunLoom(base + b);
    ASSERT_EQ(named.exit_code, 0) << named.err;
    EXPECT_EQ(named.out, numbered.out) << tier;
  }
  auto bad = RunLoom(base + "medium");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("reasoning effort \"medium\""), std::string::npos) << bad.err;
}

TEST_F(EvalCliTest, BadFlagsAreClearErrors) {
  const std::string base = "eval --model " + model_ + " --config " + config_;
  auto run = RunLoom(base + " --datasets add,reverse");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--datasets: no dataset 'reverse'"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("(it has: add, sort)"), std::string::npos) << run.err;
  run = RunLoom(base + " --efforts 25,medium");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("'medium' is not an effort"), std::string::npos) << run.err;
  run = RunLoom(base + " --efforts 101");
  EXPECT_EQ(run.exit_code, 2);
  run = RunLoom("eval --model " + dir_ / "nowhere" + " --config " + config_);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find(dir_ / "nowhere"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace loom
