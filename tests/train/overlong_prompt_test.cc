// A prompt too long for the model's context must not kill a run: GRPO skips
// its prompt group with a warning naming the file and line, counts it in
// metrics (samples_failed), and goes on; evaluation counts such a held-out
// problem as wrong (eval_skipped). Through the real binary on a JSON-lines
// dataset with one over-long line in each file.

#include <gtest/gtest.h>

#include <fstream>

#include "loom/metrics/metrics_writer.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::RunLoom;
using testing::TempDir;

std::string Line(const std::string& prompt) {
  return R"({"messages":[{"role":"user","content":")" + prompt +
         R"("}],"answer":"B","verifier":"exact"})" + "\n";
}

TEST(OverlongPromptTest, GrpoDropsTheGroupAndEvaluationCountsItWrong) {
  TempDir dir;
  const std::string overlong(400, 'x');  // byte-level tokens: far past the 128-token context
  {
    std::ofstream train(dir / "train.jsonl"), eval(dir / "eval.jsonl");
    for (int line = 1; line <= 12; ++line) {
      train << Line(line == 5 ? overlong : "Pick a letter, case " + std::to_string(line) + ".");
    }
    for (int line = 1; line <= 4; ++line) {
      eval << Line(line == 2 ? overlong : "Pick a letter, held out " + std::to_string(line) + ".");
    }
  }
  std::ofstream(dir / "config.yaml") << R"(run: {name: overlong, seed: 3, threads: 1}
model:
  arch: llama
  init: {hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2,
         num_key_value_heads: 1, head_dim: 16, max_position_embeddings: 128}
tasks:
  eval_every: 0
  datasets:
    - {name: letters, kind: jsonl, path: )" +
                                            (dir / "train.jsonl") +
                                            ", eval_path: " + (dir / "eval.jsonl") + R"(}
effort: {levels: [100], samples_per_level: [4]}
rollout: {max_batch: 16, max_new_tokens: 4}
async: {dispatch: sample, max_inflight: 16, batch_samples: 8, max_staleness: 1}
train:
  stages: [grpo]
  grpo: {steps: 8}
)";
  const std::string run_dir = dir / "run";
  auto result = RunLoom("train --config " + (dir / "config.yaml") + " --run-dir " + run_dir +
                        " --set model.path=" + (dir / "model"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  // 8 steps of 2 prompts each walk the 12 training lines more than once.
  EXPECT_NE(result.err.find("train.jsonl:5) could not start"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("eval.jsonl:2) could not start"), std::string::npos) << result.err;

  auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(records.ok()) << records.status();
  int64_t failed = 0, steps = 0;
  for (const auto& r : *records) {
    if (r.contains("eval_accuracy")) {
      EXPECT_EQ(r["eval_skipped"], 1) << r.dump();
      EXPECT_LE(r["eval_accuracy"].get<double>(), 0.75) << "the skipped problem counts as wrong";
      continue;
    }
    ++steps;
    failed += r["samples_failed"].get<int64_t>();
    EXPECT_EQ(r["samples"], 8) << "only whole subgroups of prompts that started: " << r.dump();
  }
  EXPECT_EQ(steps, 8);
  // Every sample of the long prompt's group fails, each time the line comes up.
  EXPECT_GE(failed, 4);
  EXPECT_EQ(failed % 4, 0) << failed;
}

}  // namespace
}  // namespace loom
