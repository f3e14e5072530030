// KV memory: sample-grained GC, exact accounting, pool exhaustion with both
// preemption policies.

#include <random>

#include "rollout/rollout_testing.h"

namespace loom::rollout {
namespace {

using testing::ById;
using testing::MakeEngine;
using testing::Prompt;
using testing::Request;
using testing::RunToEnd;
using testing::SmallModel;

TEST(KvMemoryTest, TenThousandSamplesLeaveThePoolEmpty) {
  auto model = SmallModel();
  EngineOptions options;
  options.pool_tokens = 2048;
  options.block_size = 4;
  auto engine = MakeEngine(*model, options);
  std::mt19937 gen(1);
  const int kSamples = 10000;
  int added = 0, finished = 0;
  while (finished < kSamples) {
    while (added < kSamples && engine->num_waiting() < 64) {
      ASSERT_TRUE(engine->Add(Request(added, Prompt(added, 2 + gen() % 5), 1 + gen() % 4)).ok());
      ++added;
    }
    ASSERT_TRUE(engine->Step().ok());
    finished += static_cast<int>(engine->TakeFinished().size());
    // Exact accounting: blocks in use are exactly what live samples hold.
    int64_t held = 0;
    for (int id = std::max(0, added - 200); id < added; ++id) {
      held += static_cast<int64_t>(engine->BlockTable(id).size());
    }
    ASSERT_EQ(engine->pool().used_blocks(), held);
  }
  EXPECT_EQ(engine->num_samples(), 0);
  EXPECT_EQ(engine->pool().used_blocks(), 0);
  EXPECT_EQ(engine->pool().free_blocks(), engine->pool().num_blocks());
}

std::vector<SampleState> RunCrowd(const model::Transformer& model, EngineOptions options,
                                  int64_t* preemptions) {
  auto engine = MakeEngine(model, options);
  for (int id = 0; id < 12; ++id) {
    EXPECT_TRUE(engine->Add(Request(id, Prompt(id, 10 + id % 3), 30)).ok());
  }
  auto done = RunToEnd(*engine);
  EXPECT_EQ(engine->pool().used_blocks(), 0);
  if (preemptions) *preemptions = engine->counters().preemptions;
  return done;
}

EngineOptions SmallPool(PreemptionPolicy policy) {
  EngineOptions options;
  options.pool_tokens = 128;  // 16 blocks; 12 samples want 5 each
  options.block_size = 8;
  options.preemption = policy;
  return options;
}

TEST(KvMemoryTest, FullPoolPreemptsByRecomputeAndEverySampleCompletes) {
  auto model = SmallModel();
  int64_t preemptions = 0;
  auto done = RunCrowd(*model, SmallPool(PreemptionPolicy::kRecompute), &preemptions);
  ASSERT_EQ(done.size(), 12u);
  EXPECT_GT(preemptions, 0);
  for (const auto& s : done) {
    EXPECT_EQ(s.finish, FinishReason::kMaxNewTokens);
    auto expected = testing::ScoreLogprobs(*model, s.tokens);
    for (int64_t t = s.prompt_length; t < s.length(); ++t) {
      EXPECT_NEAR(s.logprobs[t], expected[t], 2e-4);
    }
  }
}

TEST(KvMemoryTest, FullPoolPreemptsBySwapAndMatchesAnUnconstrainedRun) {
  auto model = SmallModel();
  int64_t preemptions = 0;
  auto constrained = RunCrowd(*model, SmallPool(PreemptionPolicy::kSwap), &preemptions);
  auto roomy = RunCrowd(*model, EngineOptions{}, nullptr);
  ASSERT_EQ(constrained.size(), 12u);
  EXPECT_GT(preemptions, 0);
  for (const auto& s : roomy) EXPECT_EQ(ById(constrained, s.id)->tokens, s.tokens) << s.id;
}

TEST(KvMemoryTest, AdmissionWaitsForRoom) {
  auto model = SmallModel();
  EngineOptions options = SmallPool(PreemptionPolicy::kRecompute);
  auto engine = MakeEngine(*model, options);
  for (int id = 0; id < 5; ++id) ASSERT_TRUE(engine->Add(Request(id, Prompt(id, 30), 4)).ok());
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(engine->num_running(), 4);  // 4 blocks each, 16 in the pool
  EXPECT_EQ(engine->num_waiting(), 1);
  EXPECT_EQ(RunToEnd(*engine).size(), 5u);
}

TEST(KvMemoryTest, ASampleLongerThanThePoolStopsAtItsCapacity) {
  auto model = SmallModel();
  EngineOptions options;
  options.pool_tokens = 64;
  options.block_size = 8;
  auto engine = MakeEngine(*model, options);
  ASSERT_TRUE(engine->Add(Request(1, Prompt(1, 60), 20)).ok());
  auto done = RunToEnd(*engine);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].finish, FinishReason::kContextLimit);
  EXPECT_EQ(done[0].length(), 64);
}

}  // namespace
}  // namespace loom::rollout
