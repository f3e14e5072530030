// `loom train` end to end on a tiny model: SFT then asynchronous GRPO through
// the real binary, model files and metrics on disk. The metrics are checked
// against what must hold whatever the model learned: the SFT loss starts at
// the uniform guess and falls, versions count optimizer steps, the reward
// parts add up, the async bounds hold, the first GRPO step is on-policy, and
// an untrained model solves nothing.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "loom/metrics/metrics_writer.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using nlohmann::json;
using testing::RunLoom;
using testing::TempDir;

// The run's shape, set on the command line so the checks below do not
// depend on what configs/test/e2e.yaml happens to say. 30 SFT steps at the
// quickstart's learning rate take the loss well below the uniform guess on
// every seed (about 5.6 -> 2.7 nats), in about a second.
constexpr int kSftSteps = 30, kGrpoSteps = 3, kEvalEvery = 10;
constexpr int kMaxNewTokens = 24, kMaxStaleness = 1, kBatchSamples = 10, kMaxInflight = 20;

std::string Overrides() {
  std::string out;
  for (const std::string& kv :
       {"train.sft.steps=" + std::to_string(kSftSteps), std::string("train.sft.warmup_steps=3"),
        "train.grpo.steps=" + std::to_string(kGrpoSteps),
        "tasks.eval_every=" + std::to_string(kEvalEvery),
        "rollout.max_new_tokens=" + std::to_string(kMaxNewTokens),
        "async.max_staleness=" + std::to_string(kMaxStaleness),
        "async.batch_samples=" + std::to_string(kBatchSamples),
        "async.max_inflight=" + std::to_string(kMaxInflight)}) {
    out += " --set " + kv;
  }
  return out;
}

struct Records {
  std::vector<json> sft, grpo, evals;  // in file order
};

Records Split(const std::vector<json>& records) {
  Records out;
  for (const json& r : records) {
    if (r.contains("eval_accuracy")) {
      out.evals.push_back(r);
    } else {
      (r["stage"] == "sft" ? out.sft : out.grpo).push_back(r);
    }
  }
  return out;
}

double Mean(const std::vector<json>& steps, size_t begin, size_t end, const char* key) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += steps[i][key].get<double>();
  return sum / static_cast<double>(end - begin);
}

// A freshly initialised model predicts nearly uniformly: its loss is about
// ln(vocab). Training must then take it well below, window after window.
void ExpectSftLossFalls(const std::vector<json>& sft, int64_t vocab) {
  ASSERT_EQ(sft.size(), static_cast<size_t>(kSftSteps));
  const double uniform = std::log(static_cast<double>(vocab));
  EXPECT_NEAR(sft[0]["loss"].get<double>(), uniform, 0.15) << sft[0].dump();
  const size_t third = sft.size() / 3;
  const double early = Mean(sft, 0, third, "loss"), middle = Mean(sft, third, 2 * third, "loss"),
               late = Mean(sft, 2 * third, sft.size(), "loss");
  EXPECT_LT(middle, early - 0.2);
  EXPECT_LT(late, middle - 0.2);
  EXPECT_LT(late, uniform - 2.0) << "early " << early << ", middle " << middle;
}

// Every optimizer step of every stage bumps the version by exactly one, and
// an evaluation reports the version it evaluated: after `step` steps of its
// stage. Evaluations run before SFT, every kEvalEvery steps and after each stage.
void ExpectVersionsCountSteps(const Records& r) {
  for (size_t i = 0; i < r.sft.size(); ++i) {
    EXPECT_EQ(r.sft[i]["step"].get<int64_t>(), static_cast<int64_t>(i) + 1);
    EXPECT_EQ(r.sft[i]["version"].get<int64_t>(), static_cast<int64_t>(i) + 1);
  }
  for (size_t i = 0; i < r.grpo.size(); ++i) {
    EXPECT_EQ(r.grpo[i]["step"].get<int64_t>(), static_cast<int64_t>(i) + 1);
    EXPECT_EQ(r.grpo[i]["version"].get<int64_t>(), kSftSteps + static_cast<int64_t>(i) + 1);
  }
  std::set<std::pair<std::string, int64_t>> evaluated;
  for (const json& e : r.evals) {
    const int64_t step = e["step"].get<int64_t>();
    const int64_t before_stage = e["stage"] == "sft" ? 0 : kSftSteps;
    EXPECT_EQ(e["version"].get<int64_t>(), before_stage + step) << e.dump();
    evaluated.insert({e["stage"].get<std::string>(), step});
  }
  std::set<std::pair<std::string, int64_t>> expected = {{"sft", kSftSteps}, {"grpo", kGrpoSteps}};
  for (int64_t step = 0; step <= kSftSteps; step += kEvalEvery) expected.insert({"sft", step});
  EXPECT_EQ(evaluated, expected);
}

// Held-out greedy accuracy is the share of the 16 problems (8 per dataset)
// solved; the untrained model solves none and never exceeds the token limit.
void ExpectEvaluationsAddUp(const std::vector<json>& evals) {
  ASSERT_FALSE(evals.empty());
  EXPECT_EQ(evals[0]["step"], 0);
  EXPECT_EQ(evals[0]["eval_accuracy"].get<double>(), 0.0) << evals[0].dump();
  EXPECT_EQ(evals[0]["eval_parse_rate"].get<double>(), 0.0) << evals[0].dump();
  for (const json& e : evals) {
    const json& by_dataset = e["eval_accuracy_by_dataset"];
    ASSERT_EQ(by_dataset.size(), 2u) << e.dump();
    const double mean =
        (by_dataset["arithmetic"].get<double>() + by_dataset["sort"].get<double>()) / 2;
    EXPECT_NEAR(e["eval_accuracy"].get<double>(), mean, 1e-9) << e.dump();
    EXPECT_LE(e["eval_mean_length"].get<double>(), kMaxNewTokens) << e.dump();
  }
}

// record[mean_key] is a weighted mean of the values in record[parts_key], so
// it lies between their extremes.
void ExpectWithinParts(const json& record, const char* mean_key, const char* parts_key) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& [name, part] : record[parts_key].items()) {
    lo = std::min(lo, part.get<double>());
    hi = std::max(hi, part.get<double>());
  }
  const double value = record[mean_key].get<double>();
  EXPECT_GE(value, lo - 1e-6) << parts_key << " in " << record.dump();
  EXPECT_LE(value, hi + 1e-6) << parts_key << " in " << record.dump();
}

// Each sample's reward is its task reward plus its length reward, so the
// means add up, and every breakdown averages the same rewards.
void ExpectRewardsAddUp(const json& step) {
  EXPECT_NEAR(step["reward_mean"].get<double>(),
              step["reward_task_mean"].get<double>() + step["reward_length_mean"].get<double>(),
              1e-6)
      << step.dump();
  ExpectWithinParts(step, "reward_mean", "reward_by_effort");
  ExpectWithinParts(step, "reward_mean", "reward_by_dataset");
  ExpectWithinParts(step, "response_length_mean", "response_length_by_effort");
  ExpectWithinParts(step, "response_length_mean", "response_length_by_dataset");
  ExpectWithinParts(step, "reasoning_length_mean", "reasoning_length_by_effort");
  EXPECT_LE(step["reasoning_length_mean"].get<double>(), step["response_length_mean"].get<double>())
      << "reasoning is part of the response";
  for (const char* share :
       {"parse_rate", "clip_fraction", "masked_token_fraction", "informative_subgroup_fraction"}) {
    EXPECT_GE(step[share].get<double>(), 0.0) << share;
    EXPECT_LE(step[share].get<double>(), 1.0) << share;
  }
}

// The asynchronous loop's bounds: no trained token older than max_staleness
// versions, at least batch_samples per step, at most max_inflight in flight,
// no response past the token limit, and nothing trained that the engine did
// not feed (a sample of n generated tokens feeds its prompt and n - 1 of them).
void ExpectAsyncBoundsHold(const std::vector<json>& grpo) {
  double fed = 0, trained = 0;
  for (const json& step : grpo) {
    SCOPED_TRACE(step.dump());
    EXPECT_LE(step["staleness_max"].get<int64_t>(), kMaxStaleness);
    EXPECT_LE(step["staleness_mean"].get<double>(), step["staleness_max"].get<double>());
    EXPECT_GE(step["samples"].get<int64_t>(), kBatchSamples);
    EXPECT_LE(step["inflight_max"].get<int64_t>(), kMaxInflight);
    EXPECT_LE(step["response_length_mean"].get<double>(), kMaxNewTokens);
    fed += step["decode_tokens"].get<double>() + step["prefill_tokens"].get<double>();
    trained += step["samples"].get<double>() * step["response_length_mean"].get<double>();
    EXPECT_GE(fed, trained - 1e-6);
  }
}

// GRPO's first step trains on samples all drawn by the weights it starts
// from: lag 0, and the trainer's log-probs reproduce the engine's (ratio 1,
// nothing clipped).
void ExpectFirstGrpoStepOnPolicy(const json& first) {
  EXPECT_EQ(first["staleness_max"].get<int64_t>(), 0) << first.dump();
  ASSERT_GT(first["informative_subgroup_fraction"].get<double>(), 0.0) << first.dump();
  EXPECT_NEAR(first["ratio_mean"].get<double>(), 1.0, 1e-4) << first.dump();
  EXPECT_EQ(first["clip_fraction"].get<double>(), 0.0) << first.dump();
}

TEST(TrainEndToEndTest, SftThenGrpoMetricsHoldTogether) {
  TempDir dir;
  const std::string run_dir = dir / "run";
  auto result = RunLoom("train --config configs/test/e2e.yaml --run-dir " + run_dir +
                        " --set model.path=" + (dir / "model") + Overrides());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(records.ok()) << records.status();
  const Records r = Split(*records);
  const json model_config = json::parse(std::ifstream(dir / "model/config.json"));

  ExpectSftLossFalls(r.sft, model_config["vocab_size"].get<int64_t>());
  ASSERT_EQ(r.grpo.size(), static_cast<size_t>(kGrpoSteps));
  ExpectVersionsCountSteps(r);
  ExpectEvaluationsAddUp(r.evals);
  for (const json& step : r.grpo) {
    SCOPED_TRACE("grpo step " + step["step"].dump());
    ExpectRewardsAddUp(step);
  }
  ExpectAsyncBoundsHold(r.grpo);
  ExpectFirstGrpoStepOnPolicy(r.grpo[0]);

  // Each stage's weights are a loadable model directory.
  auto logprobs =
      testing::RunCommand("printf '{\"tokens\":[1,2,3]}\\n' | " + std::string(LOOM_BINARY) +
                          " logprobs --model " + run_dir + "/stages/grpo --input /dev/stdin");
  EXPECT_EQ(logprobs.exit_code, 0) << logprobs.err;
  EXPECT_NE(logprobs.out.find("logprobs"), std::string::npos) << logprobs.out;

  // `loom eval` on the saved weights, in another process, reproduces the
  // run's last evaluation at each training effort.
  auto eval = RunLoom("eval --json --model " + run_dir + "/stages/grpo --config " + run_dir +
                      "/config.yaml");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  const json results = json::parse(eval.out.substr(eval.out.rfind("{\"results\"")))["results"];
  const json& last = r.evals.back();
  ASSERT_TRUE(last.contains("eval_accuracy_by_effort")) << last.dump();
  std::map<std::string, std::pair<double, double>> by_effort;  // accuracy, problems
  for (const json& cell : results) {
    auto& [accuracy, problems] = by_effort[std::to_string(cell["effort"].get<int>())];
    accuracy += cell["pass@1"].get<double>() * cell["problems"].get<double>();
    problems += cell["problems"].get<double>();
  }
  ASSERT_EQ(by_effort.size(), last["eval_accuracy_by_effort"].size());
  for (const auto& [effort, sums] : by_effort) {
    EXPECT_NEAR(sums.first / sums.second, last["eval_accuracy_by_effort"][effort].get<double>(),
                1e-9)
        << "effort " << effort;
  }
}

TEST(TrainEndToEndTest, MissingModelWithoutArchIsAClearError) {
  TempDir dir;
  auto result = RunLoom("train --config configs/test/e2e.yaml --run-dir " + (dir / "run") +
                        " --set model.path=" + (dir / "nothing") + " --set 'model.arch=\"\"'");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("holds no model"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace loom
