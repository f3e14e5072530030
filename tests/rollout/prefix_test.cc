// Prefix sharing in the rollout engine: a group's prompt prefilled once, and
// samples on shared blocks generating exactly what they generate on private
// ones, across interruption, weight updates, export and import, MoE routing,
// continuation and a full pool.

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "loom/rollout/engine.h"
#include "loom/rollout/state_io.h"
#include "rollout_testing.h"

namespace loom::rollout {
namespace {

using testing::ById;
using testing::MakeEngine;
using testing::Prompt;
using testing::Request;
using testing::RunToEnd;
using testing::SmallModel;

EngineOptions Sharing(bool on, bool keep_released = false) {
  EngineOptions options;
  options.prefix_cache = on;
  options.prefix_keep_released = keep_released;
  options.block_size = 16;
  return options;
}

void AddGroup(RolloutEngine& engine, uint64_t first_id, int group,
              const std::vector<int64_t>& prompt, int64_t max_new) {
  for (int i = 0; i < group; ++i) {
    ASSERT_TRUE(engine.Add(Request(first_id + i, prompt, max_new)).ok());
  }
}

// The same tokens and versions, and log-probs equal to float rounding: a
// sample on shared blocks computes the rest of its prompt in a smaller chunk
// than the sample that computed the prefix, and a matrix product's rounding
// depends on its shape.
void ExpectSameSamples(const std::vector<SampleState>& shared,
                       const std::vector<SampleState>& alone) {
  ASSERT_EQ(shared.size(), alone.size());
  for (const SampleState& s : alone) {
    const SampleState* other = ById(shared, s.id);
    ASSERT_NE(other, nullptr) << s.id;
    EXPECT_EQ(other->tokens, s.tokens) << "sample " << s.id;
    ASSERT_EQ(other->logprobs.size(), s.logprobs.size());
    float worst = 0;
    for (size_t t = 0; t < s.logprobs.size(); ++t) {
      worst = std::max(worst, std::abs(other->logprobs[t] - s.logprobs[t]));
    }
    EXPECT_LE(worst, 1e-5) << "sample " << s.id;
    EXPECT_EQ(other->versions, s.versions) << "sample " << s.id;
  }
}

// Prompts of 40 tokens (2 full blocks and a partial one) and of 48 (3 full
// blocks: every token matches and the last one is fed again on a copy).
class GroupPromptTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(GroupPromptTest, AGroupPrefillsItsPromptOnceAndSamplesExactlyAsWithout) {
  const int64_t length = GetParam();
  auto model = SmallModel();
  auto alone = MakeEngine(*model, Sharing(false));
  auto shared = MakeEngine(*model, Sharing(true));
  for (RolloutEngine* e : {alone.get(), shared.get()}) AddGroup(*e, 0, 8, Prompt(1, length), 24);
  auto done_alone = RunToEnd(*alone);
  auto done_shared = RunToEnd(*shared);
  ExpectSameSamples(done_shared, done_alone);
  const int64_t full = length / 16 * 16;
  const int64_t taken = std::min(full, length - 1);
  // A chunk of one token counts as decoding.
  const int64_t rest = length - taken;
  EXPECT_EQ(alone->counters().prefill_tokens, 8 * length);
  EXPECT_EQ(shared->counters().prefix_hit_tokens, 7 * taken);
  EXPECT_EQ(shared->counters().prefill_tokens, length + (rest > 1 ? 7 * rest : 0));
  EXPECT_EQ(shared->pool().prefix_counters().copies, length % 16 == 0 ? 7 : 0);
  EXPECT_EQ(shared->pool().used_blocks(), 0);
}

INSTANTIATE_TEST_SUITE_P(Lengths, GroupPromptTest, ::testing::Values(40, 48));

TEST(PrefixEngineTest, SharedPromptBlocksAreHeldOnceWhileTheGroupDecodes) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model, Sharing(true));
  AddGroup(*engine, 0, 8, Prompt(2, 64), 40);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(engine->Step().ok());
  ASSERT_EQ(engine->num_running(), 8);
  // Four prompt blocks shared by eight samples; each holds its own tail.
  const std::vector<int32_t> first = engine->BlockTable(0);
  for (uint64_t id = 1; id < 8; ++id) {
    const std::vector<int32_t> table = engine->BlockTable(id);
    EXPECT_TRUE(std::equal(first.begin(), first.begin() + 3, table.begin())) << id;
    EXPECT_NE(table.back(), first.back());
  }
  EXPECT_EQ(engine->pool().shared_references(), 7 * 3);
}

// Interrupt every few steps, export two samples (one on shared blocks) and
// read them back through the checkpoint files, change the weights twice, and
// resume: the engine with sharing generates exactly what the one without does
// under the same script. The leaders are added one step before their groups,
// so both engines admit every sample at the same step.
TEST(PrefixEngineTest, InterruptionWeightUpdatesAndCheckpointsKeepSharedSamplesExact) {
  const std::string dir = ::testing::TempDir();
  std::vector<std::vector<SampleState>> results;
  for (bool on : {false, true}) {
    auto model = SmallModel();
    auto engine = MakeEngine(*model, Sharing(on));
    AddGroup(*engine, 0, 1, Prompt(3, 37), 30);
    AddGroup(*engine, 10, 1, Prompt(4, 50), 30);
    ASSERT_TRUE(engine->Step().ok());
    AddGroup(*engine, 1, 5, Prompt(3, 37), 30);
    AddGroup(*engine, 11, 3, Prompt(4, 50), 30);
    std::vector<SampleState> done;
    int64_t version = 0;
    for (int step = 1; engine->num_running() + engine->num_waiting() > 0; ++step) {
      ASSERT_TRUE(engine->Step().ok());
      for (auto& s : engine->TakeFinished()) done.push_back(std::move(s));
      if (step % 4 != 0) continue;
      engine->RequestInterrupt();
      ASSERT_TRUE(engine->Step()->parked);
      for (uint64_t id : {1, 11}) {
        const SampleState* state = engine->Find(id);
        if (state == nullptr || state->phase == SamplePhase::kFinished) continue;
        auto exported = engine->Export(id);
        ASSERT_TRUE(exported.ok()) << exported.status();
        const std::string prefix = dir + "/prefix_" + std::to_string(on) + "_" + std::to_string(id);
        ASSERT_TRUE(WriteSampleState(*exported, prefix).ok());
        auto read = ReadSampleState(prefix);
        ASSERT_TRUE(read.ok()) << read.status();
        ASSERT_TRUE(engine->Import(*std::move(read)).ok());
      }
      const bool update = step == 8 || step == 16;
      if (update) testing::PerturbWeights(*model, 100 + step);
      ASSERT_TRUE(engine->Resume(update ? ++version : version).ok());
    }
    for (auto& s : engine->TakeFinished()) done.push_back(std::move(s));
    ASSERT_EQ(done.size(), 10u);
    EXPECT_EQ(engine->pool().used_blocks(), 0);
    if (on) {
      EXPECT_EQ(engine->counters().prefix_hit_tokens, 5 * 32 + 3 * 48);
    }
    results.push_back(std::move(done));
  }
  ExpectSameSamples(results[1], results[0]);
  EXPECT_EQ(ById(results[1], 1)->segments.size(), 3u);  // the updates landed mid-sample
}

// The checkpoint path of a resumed run: every sample exported from one engine
// (through the files) and imported into a fresh one. The fresh engine shares
// again what was shared and goes on exactly as the first one does.
TEST(PrefixEngineTest, SamplesImportedIntoAFreshEngineShareAgainAndContinueExactly) {
  auto model = SmallModel();
  auto first = MakeEngine(*model, Sharing(true));
  AddGroup(*first, 0, 5, Prompt(9, 45), 30);
  AddGroup(*first, 10, 3, Prompt(10, 64), 30);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(first->Step().ok());
  first->ParkAll();
  const int64_t shared_before = first->pool().shared_references();
  ASSERT_GT(shared_before, 0);
  auto second = MakeEngine(*model, Sharing(true));
  const std::string dir = ::testing::TempDir();
  for (uint64_t id : {0, 1, 2, 3, 4, 10, 11, 12}) {
    auto state = first->Export(id);
    ASSERT_TRUE(state.ok()) << state.status();
    const std::string prefix = dir + "/fresh_" + std::to_string(id);
    ASSERT_TRUE(WriteSampleState(*state, prefix).ok());
    ASSERT_TRUE(first->Import(*state).ok());  // the first engine goes on too
    auto read = ReadSampleState(prefix);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->kv.published, state->kv.published);
    ASSERT_TRUE(second->Import(*std::move(read)).ok());
  }
  ASSERT_TRUE(first->Resume(0).ok());
  ASSERT_TRUE(first->Step().ok());
  ASSERT_TRUE(second->Step().ok());
  EXPECT_EQ(first->pool().shared_references(), shared_before);
  EXPECT_EQ(second->pool().shared_references(), shared_before);
  EXPECT_EQ(second->pool().used_blocks(), first->pool().used_blocks());
  auto a = RunToEnd(*first);
  auto b = RunToEnd(*second);
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (const SampleState& s : a) {
    const SampleState* other = ById(b, s.id);
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(other->tokens, s.tokens) << s.id;
    EXPECT_EQ(other->logprobs, s.logprobs) << s.id;  // bitwise
  }
}

// Without keep_released a block lives only while a sample holds it.
TEST(PrefixEngineTest, WithoutKeepReleasedAFinishedSamplesBlocksAreFreed) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model, Sharing(true));
  ASSERT_TRUE(engine->Add(Request(1, Prompt(11, 40), 4)).ok());
  RunToEnd(*engine);
  EXPECT_EQ(engine->pool().cached_blocks(), 0);
  EXPECT_EQ(engine->pool().free_blocks(), engine->pool().num_blocks());
  ASSERT_TRUE(engine->Add(Request(2, Prompt(11, 40), 4)).ok());
  RunToEnd(*engine);
  EXPECT_EQ(engine->counters().prefix_hit_tokens, 0);
}

TEST(PrefixEngineTest, NewSamplesTakeOnlyBlocksOfTheCurrentVersionUnlessTheLagAllows) {
  for (int64_t lag : {0, 1}) {
    auto model = SmallModel();
    EngineOptions options = Sharing(true, /*keep_released=*/true);
    options.prefix_max_version_lag = lag;
    auto engine = MakeEngine(*model, options);
    ASSERT_TRUE(engine->Add(Request(1, Prompt(5, 40), 4)).ok());
    RunToEnd(*engine);
    engine->ParkAll();
    testing::PerturbWeights(*model, 7);
    ASSERT_TRUE(engine->Resume(1).ok());
    ASSERT_TRUE(engine->Add(Request(2, Prompt(5, 40), 4)).ok());
    RunToEnd(*engine);
    EXPECT_EQ(engine->counters().prefix_hit_tokens, lag == 0 ? 0 : 32) << "lag " << lag;
    // Under lag 0 the stale blocks were dropped at the update and the new
    // sample published its own; under lag 1 it took the old ones.
    EXPECT_EQ(engine->pool().cached_blocks(), 2) << "lag " << lag;
    EXPECT_EQ(engine->pool().prefix_counters().published, lag == 0 ? 4 : 2) << "lag " << lag;
  }
}

TEST(PrefixEngineTest, MoeRoutingOfASharedPromptIsCopiedToEverySample) {
  std::vector<std::vector<SampleState>> results;
  for (bool on : {false, true}) {
    auto model = SmallModel("qwen3_moe");
    auto engine = MakeEngine(*model, Sharing(on));
    AddGroup(*engine, 0, 4, Prompt(6, 40), 10);
    results.push_back(RunToEnd(*engine));
  }
  ExpectSameSamples(results[1], results[0]);
  for (const SampleState& s : results[1]) {
    ASSERT_EQ(s.routing_rows(), s.length() - 1);
    EXPECT_EQ(s.routing, ById(results[0], s.id)->routing) << s.id;
  }
}

// A conversation's next request carries the whole transcript so far: it takes
// the blocks the previous turn published and prefills only what is new.
TEST(PrefixEngineTest, TheNextTurnOfAConversationTakesThePreviousTurnsBlocks) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model, Sharing(true, /*keep_released=*/true));
  ASSERT_TRUE(engine->Add(Request(1, Prompt(7, 30), 20)).ok());
  auto first = RunToEnd(*engine);
  ASSERT_EQ(first.size(), 1u);
  std::vector<int64_t> next = first[0].tokens;  // 50 tokens, 49 of them fed
  for (int64_t t : Prompt(8, 10)) next.push_back(t);
  ASSERT_TRUE(engine->Add(Request(2, next, 5)).ok());
  auto stats = engine->Step();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->prefix_hit_tokens, 48);
  EXPECT_EQ(stats->prefill_tokens, static_cast<int64_t>(next.size()) - 48);
  auto second = RunToEnd(*engine);
  ASSERT_EQ(second.size(), 1u);
  const std::vector<float> expected = testing::ScoreLogprobs(*model, second[0].tokens);
  for (int64_t t = second[0].prompt_length; t < second[0].length(); ++t) {
    EXPECT_NEAR(second[0].logprobs[t], expected[t], 2e-4);
  }
}

TEST(PrefixEngineTest, AFullPoolEvictsCachedPrefixesAndEverySampleCompletes) {
  auto model = SmallModel();
  EngineOptions options = Sharing(true, /*keep_released=*/true);
  options.pool_tokens = 256;  // 16 blocks
  auto engine = MakeEngine(*model, options);
  for (int prompt = 0; prompt < 6; ++prompt)
    AddGroup(*engine, prompt * 10, 5, Prompt(prompt, 40), 20);
  auto done = RunToEnd(*engine);
  EXPECT_EQ(done.size(), 30u);
  for (const SampleState& s : done) EXPECT_EQ(s.finish, FinishReason::kMaxNewTokens) << s.id;
  EXPECT_GT(engine->pool().prefix_counters().evictions, 0);
  EXPECT_GT(engine->counters().prefix_hit_tokens, 0);
  EXPECT_EQ(engine->pool().used_blocks(), 0);
}

TEST(PrefixEngineTest, PreemptionByRecomputeTakesItsOwnBlocksBackFromTheCache) {
  auto model = SmallModel();
  EngineOptions options = Sharing(true, /*keep_released=*/true);
  options.pool_tokens = 160;  // 10 blocks: four 40-token samples cannot all grow
  auto engine = MakeEngine(*model, options);
  for (uint64_t id = 0; id < 4; ++id)
    ASSERT_TRUE(engine->Add(Request(id, Prompt(id, 40), 30)).ok());
  auto done = RunToEnd(*engine);
  EXPECT_EQ(done.size(), 4u);
  EXPECT_GT(engine->counters().preemptions, 0);
  auto reference = MakeEngine(*model, Sharing(false));
  for (uint64_t id = 0; id < 4; ++id)
    ASSERT_TRUE(reference->Add(Request(id, Prompt(id, 40), 30)).ok());
  auto expected = RunToEnd(*reference);
  for (const SampleState& s : expected) EXPECT_EQ(ById(done, s.id)->tokens, s.tokens) << s.id;
}

TEST(PrefixEngineTest, CreateRejectsANegativeLag) {
  auto model = SmallModel();
  EngineOptions options = Sharing(true);
  options.prefix_max_version_lag = -1;
  EXPECT_EQ(RolloutEngine::Create(*model, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::rollout
