// GRPO through the real asynchronous loop moves a model toward what the
// verifier rewards. SFT teaches a tiny model to answer "A" to three prompts
// in four and "B" to the rest, at random; the verifier wants "B". After SFT
// the greedy answer is "A" everywhere (held-out accuracy 0); GRPO samples
// the rare "B", rewards it, and must flip the greedy answer. The same run at
// learning rate 0 is the control: it must not move. At a sampling temperature
// other than 1 the trainer's log-probs must still match the engine's.

#include <gtest/gtest.h>

#include <fstream>

#include "loom/metrics/metrics_writer.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::RunLoom;
using testing::TempDir;

std::string Line(int i, const std::string& reference) {
  std::string messages =
      R"([{"role":"user","content":"Pick a letter, case )" + std::to_string(i) + R"(."})";
  if (!reference.empty()) {
    messages += R"(,{"role":"assistant","reasoning_content":"","content":")" + reference + "\"}";
  }
  return R"({"messages":)" + messages + R"(],"answer":"B","verifier":"exact"})" + "\n";
}

class GrpoLearnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream train(dir_ / "train.jsonl"), eval(dir_ / "eval.jsonl");
    uint64_t state = 7;
    for (int i = 0; i < 2000; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      train << Line(i, (state >> 33) % 4 == 0 ? "B" : "A");
    }
    for (int i = 2000; i < 2064; ++i) eval << Line(i, "");
    std::ofstream(dir_ / "config.yaml")
        << R"(run: {name: learns, seed: 1, threads: 2, deterministic: true}
model:
  arch: llama
  init: {hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 2,
         num_key_value_heads: 1, head_dim: 32, max_position_embeddings: 256}
tasks:
  eval_every: 0
  datasets:
    - {name: letters, kind: jsonl, path: )" +
               (dir_ / "train.jsonl") + ", eval_path: " + (dir_ / "eval.jsonl") + R"(}
effort: {levels: [100], samples_per_level: [8]}
rollout: {max_batch: 64, max_new_tokens: 8, temperature: 1.0}
async: {dispatch: sample, max_inflight: 32, batch_samples: 32, max_staleness: 1}
train:
  stages: [sft, grpo]
  sft: {steps: 60, batch_sequences: 8, lr: 3.0e-3, warmup_steps: 5}
  grpo: {steps: 15, lr: 1.0e-3, warmup_steps: 2}
)";
  }

  std::vector<nlohmann::json> Run(const std::string& name, const std::string& extra) {
    const std::string run_dir = dir_ / name;
    auto result = RunLoom("train --config " + (dir_ / "config.yaml") + " --run-dir " + run_dir +
                          " --set model.path=" + run_dir + "/model" + extra);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
    EXPECT_TRUE(records.ok()) << records.status();
    return records.ok() ? *records : std::vector<nlohmann::json>{};
  }

  // Held-out accuracy after each stage: {after SFT, after GRPO}.
  static std::pair<double, double> StageAccuracy(const std::vector<nlohmann::json>& records) {
    std::pair<double, double> accuracy{-1, -1};
    for (const auto& r : records) {
      if (!r.contains("eval_accuracy") || r["step"] == 0) continue;
      (r["stage"] == "sft" ? accuracy.first : accuracy.second) = r["eval_accuracy"].get<double>();
    }
    return accuracy;
  }

  TempDir dir_;
};

TEST_F(GrpoLearnsTest, GreedyAnswerFlipsToTheRewardedOne) {
  const auto [after_sft, after_grpo] = StageAccuracy(Run("learn", ""));
  EXPECT_LE(after_sft, 0.1);
  EXPECT_GE(after_grpo, 0.8);
}

// Data-parallel: 2 ranks × 1 thread (`loom launch`), asynchronous sample
// dispatch, the same global batch: the greedy answer flips as with 1 rank.
TEST_F(GrpoLearnsTest, TwoRanksFlipItAsWellAsOne) {
  const std::string run_dir = dir_ / "two";
  auto result =
      RunLoom("launch --nproc 2 -- train --config " + (dir_ / "config.yaml") + " --run-dir " +
              run_dir + " --set model.path=" + run_dir + "/model --set run.threads=1");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(records.ok()) << records.status();
  const auto [after_sft, after_grpo] = StageAccuracy(*records);
  EXPECT_LE(after_sft, 0.1);
  EXPECT_GE(after_grpo, 0.8);
  for (const auto& r : *records) {
    // Each rank trains at least its half of the batch (whole subgroups).
    if (r.value("stage", "") == "grpo" && r.contains("reward_mean")) {
      EXPECT_GE(r["rank_samples"].get<int64_t>(), 16);
      EXPECT_GE(r["samples"].get<int64_t>(), r["rank_samples"].get<int64_t>() + 16);
    }
  }
}

TEST_F(GrpoLearnsTest, AtLearningRateZeroNothingMoves) {
  const auto [after_sft, after_grpo] = StageAccuracy(Run("control", " --set train.grpo.lr=0"));
  EXPECT_LE(after_sft, 0.1);
  EXPECT_EQ(after_grpo, after_sft);
}

// The engine records behaviour log-probs at the sampling temperature; the
// trainer must score at the same one, or the importance ratios of an
// unchanged policy drift from 1 and PPO clips tokens it should not.
TEST_F(GrpoLearnsTest, ImportanceRatiosStayAtOneWhenSamplingAtTemperature) {
  int steps = 0;
  for (const auto& r : Run("tempered", " --set train.grpo.lr=0 --set rollout.temperature=0.7")) {
    if (r["stage"] != "grpo" || !r.contains("ratio_mean")) continue;
    ++steps;
    EXPECT_NEAR(r["ratio_mean"].get<double>(), 1.0, 1e-3) << r.dump();
    EXPECT_EQ(r["clip_fraction"].get<double>(), 0.0) << r.dump();
  }
  EXPECT_EQ(steps, 15);
}

// grpo.kl_coef anchors the policy to the weights GRPO started from: the KL
// of the first step is exactly 0 (the reference is those weights), and a
// strong anchor keeps the policy much closer than a negligible one.
TEST_F(GrpoLearnsTest, KlPenaltyHoldsThePolicyNearTheStageStart) {
  auto late_kl = [](const std::vector<nlohmann::json>& records) {
    double sum = 0;
    int n = 0;
    for (const auto& r : records) {
      if (r["stage"] != "grpo" || !r.contains("kl")) continue;
      if (r["step"] == 1) {
        EXPECT_EQ(r["kl"].get<double>(), 0.0) << r.dump();
      }
      if (r["step"].get<int>() > 10) {
        sum += r["kl"].get<double>();
        ++n;
      }
    }
    EXPECT_EQ(n, 5);
    return n > 0 ? sum / n : -1;
  };
  const double free = late_kl(Run("free", " --set grpo.kl_coef=1e-6"));
  const double anchored = late_kl(Run("anchored", " --set grpo.kl_coef=3"));
  EXPECT_GT(free, 0.05);
  EXPECT_LT(anchored, 0.5 * free);
}

}  // namespace
}  // namespace loom
