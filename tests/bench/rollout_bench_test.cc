// The rollout benchmark's result on a tiny run: every reported key, and the
// work behind each measure counted exactly (timings are reported by `loom
// bench rollout`, never asserted).

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "loom/bench/rollout_bench.h"

namespace loom::bench {
namespace {

TEST(RolloutBenchTest, ReportsEveryMeasure) {
  RolloutBenchOptions options;
  options.batch_sizes = {1, 4};
  options.decode_tokens = 4;
  options.interrupt_rounds = 3;
  options.resume_samples = 4;
  options.resume_prefix = 70;  // not a multiple of the block size: the last block is part-full
  auto text = RunRolloutBench(options);
  ASSERT_TRUE(text.ok()) << text.status();
  auto j = nlohmann::json::parse(*text);
  EXPECT_TRUE(j["decode_tokens_per_s"].contains("1"));
  EXPECT_TRUE(j["decode_tokens_per_s"].contains("4"));
  EXPECT_TRUE(j.contains("interrupt_latency_ms_p99"));
  EXPECT_TRUE(j.contains("resume_keep_s"));
  EXPECT_TRUE(j.contains("reprefill_s"));
  EXPECT_TRUE(j.contains("resume_vs_reprefill_speedup"));
  EXPECT_EQ(j["interrupt_rounds"].get<int64_t>(), 3);
  EXPECT_LE(j["interrupt_latency_steps_max"].get<double>(), 1.0);

  // Resume vs re-prefill. The four 70-token prompts fit one step's token
  // budget, so each sample is parked holding exactly its prompt's KV; resuming
  // on that KV feeds none of it again, while a re-prefill would feed all
  // 4 x 71 tokens (docs/PERFORMANCE.md's speedup is that difference).
  EXPECT_EQ(j["resume_samples"].get<int64_t>(), 4);
  EXPECT_EQ(j["resume_prefix_tokens"].get<int64_t>(), 70);
  EXPECT_EQ(j["resume_keep_prefill_tokens"].get<int64_t>(), 0);

  // KV memory there: 70 cached tokens per sample in whole blocks
  // (kv_pool.h: allocated = blocks in use x bytes per block).
  const int64_t block = j["kv_block_size"].get<int64_t>();
  ASSERT_GT(block, 0);
  const double blocks = static_cast<double>((70 + block - 1) / block);
  EXPECT_NEAR(j["kv_bytes_per_token_ratio"].get<double>(), 70.0 / (blocks * block), 1e-9);
}

// `--prefix`: both workloads without and with sharing, and the work sharing
// saves counted exactly (16-token blocks).
TEST(RolloutBenchTest, PrefixCountsTheWorkSharingSaves) {
  RolloutBenchOptions options;
  options.prefix = true;
  options.group_size = 4;
  options.group_prompt = 40;  // 2 full blocks and 8 tokens
  options.agent_episodes = 3;
  options.agent_system = 64;  // 4 full blocks
  options.agent_task = 8;
  options.prefix_new_tokens = 4;
  auto text = RunRolloutBench(options);
  ASSERT_TRUE(text.ok()) << text.status();
  auto j = nlohmann::json::parse(*text);
  const nlohmann::json& group = j["prefix_group"];
  EXPECT_EQ(group["unshared"]["prefill_tokens"].get<int64_t>(), 4 * 40);
  EXPECT_EQ(group["shared"]["prefill_tokens"].get<int64_t>(), 40 + 3 * 8);
  EXPECT_EQ(group["shared"]["prefix_hit_tokens"].get<int64_t>(), 3 * 32);
  EXPECT_EQ(group["unshared"]["prefix_hit_tokens"].get<int64_t>(), 0);
  // Prompt blocks: 4 x 3 private against 2 shared + 4 own.
  EXPECT_DOUBLE_EQ(group["prompt_kv_bytes_ratio"].get<double>(), 12.0 / 6.0);
  const nlohmann::json& agents = j["prefix_agents"];
  EXPECT_EQ(agents["prompt_tokens"].get<int64_t>(), 72);
  EXPECT_EQ(agents["shared"]["prefix_hit_tokens"].get<int64_t>(), 2 * 64);
  EXPECT_EQ(agents["shared"]["prefill_tokens"].get<int64_t>(), 72 + 2 * 8);
  EXPECT_DOUBLE_EQ(agents["prompt_kv_bytes_ratio"].get<double>(), 15.0 / 7.0);
  for (const nlohmann::json* w : {&group, &agents}) {
    EXPECT_GT((*w)["prefill_speedup"].get<double>(), 0);
    EXPECT_GT((*w)["decode_ratio"].get<double>(), 0);
  }
}

TEST(RolloutBenchTest, MissingModelDirectoryIsAnError) {
  RolloutBenchOptions options;
  options.model_dir = "/nonexistent/model";
  EXPECT_FALSE(RunRolloutBench(options).ok());
}

}  // namespace
}  // namespace loom::bench
