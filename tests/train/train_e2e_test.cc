// `loom train` end to end on a tiny model: SFT then asynchronous GRPO, a few
// steps each, through the real binary, model files and metrics on disk.

#include <gtest/gtest.h>

#include <filesystem>

#include "loom/metrics/metrics_writer.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::RunLoom;
using testing::TempDir;

TEST(TrainEndToEndTest, SftThenGrpoWritesMetricsAndWeights) {
  TempDir dir;
  const std::string run_dir = dir / "run";
  auto result = RunLoom("train --config configs/test/e2e.yaml --run-dir " + run_dir +
                        " --set model.path=" + (dir / "model"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(records.ok()) << records.status();
  int sft_steps = 0, grpo_steps = 0, evals = 0;
  int64_t last_version = 0;
  for (const auto& r : *records) {
    if (r.contains("eval_accuracy")) {
      ++evals;
      EXPECT_GE(r["eval_accuracy"].get<double>(), 0.0);
      EXPECT_LE(r["eval_accuracy"].get<double>(), 1.0);
      continue;
    }
    EXPECT_GT(r["version"].get<int64_t>(), last_version) << r.dump();
    last_version = r["version"].get<int64_t>();
    if (r["stage"] == "sft") {
      ++sft_steps;
      EXPECT_GT(r["loss"].get<double>(), 0.0);
    } else {
      ++grpo_steps;
      EXPECT_EQ(r["stage"], "grpo");
      for (const char* key : {"reward_mean", "reward_task_mean", "reward_length_mean",
                              "staleness_max", "inflight_mean", "clip_fraction", "grad_norm",
                              "masked_token_fraction", "rollout_tokens_per_s"}) {
        EXPECT_TRUE(r.contains(key)) << key << " missing in " << r.dump();
      }
      EXPECT_LE(r["staleness_max"].get<int64_t>(), 1);  // async.max_staleness
      EXPECT_LE(r["reward_length_mean"].get<double>(), 0.0);
      EXPECT_TRUE(r["reward_by_effort"].contains("50")) << r.dump();
      EXPECT_TRUE(r["reward_by_dataset"].contains("sort") ||
                  r["reward_by_dataset"].contains("arithmetic"));
    }
  }
  EXPECT_EQ(sft_steps, 3);
  EXPECT_EQ(grpo_steps, 3);
  EXPECT_GE(evals, 4);  // before SFT, during and after each stage
  // Each stage's weights are a loadable model directory.
  auto logprobs = testing::RunCommand("printf '{\"tokens\":[1,2,3]}\\n' | " + std::string(LOOM_BINARY) +
                             " logprobs --model " + run_dir + "/stages/grpo --input /dev/stdin");
  EXPECT_EQ(logprobs.exit_code, 0) << logprobs.err;
  EXPECT_NE(logprobs.out.find("logprobs"), std::string::npos) << logprobs.out;
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
