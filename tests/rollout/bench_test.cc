// The rollout benchmark's result: every reported key, on a tiny run (timings
// are not asserted here; `loom bench rollout` reports them).

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "loom/rollout/bench.h"

namespace loom::rollout {
namespace {

TEST(RolloutBenchTest, ReportsEveryMeasure) {
  RolloutBenchOptions options;
  options.batch_sizes = {1, 4};
  options.decode_tokens = 4;
  options.interrupt_rounds = 3;
  options.resume_samples = 4;
  options.resume_prefix = 64;
  auto text = RunRolloutBench(options);
  ASSERT_TRUE(text.ok()) << text.status();
  auto j = nlohmann::json::parse(*text);
  EXPECT_TRUE(j["decode_tokens_per_s"].contains("1"));
  EXPECT_TRUE(j["decode_tokens_per_s"].contains("4"));
  EXPECT_LE(j["interrupt_latency_steps_p99"].get<double>(), 1.0);
  EXPECT_TRUE(j.contains("interrupt_latency_ms_p99"));
  EXPECT_EQ(j["resume_samples"].get<int64_t>(), 4);
  EXPECT_GE(j["resume_prefix_tokens"].get<int64_t>(), 64);
  EXPECT_EQ(j["resume_keep_prefill_tokens"].get<int64_t>(), 0);  // no re-prefill on keep
  EXPECT_GT(j["resume_vs_reprefill_speedup"].get<double>(), 0.0);
  EXPECT_GT(j["kv_bytes_per_token_ratio"].get<double>(), 0.9);
}

TEST(RolloutBenchTest, MissingModelDirectoryIsAnError) {
  RolloutBenchOptions options;
  options.model_dir = "/nonexistent/model";
  EXPECT_FALSE(RunRolloutBench(options).ok());
}

}  // namespace
}  // namespace loom::rollout
