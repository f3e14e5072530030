// Multi-turn samples: park at a tool-call end holding the KV, Append
// environment tokens, continue after prefilling only those.

#include "rollout/rollout_testing.h"

namespace loom::rollout {
namespace {

using testing::MakeEngine;
using testing::Prompt;
using testing::Request;
using testing::SmallModel;

// A request that reaches a "tool-call end" after every generated token.
SampleRequest ToolRequest(uint64_t id, int64_t vocab) {
  SampleRequest r = Request(id, Prompt(id, 8), 30);
  for (int64_t t = 0; t < vocab; ++t) r.stop.tool_call_end.push_back({t});
  return r;
}

// Steps until sample `id` waits for a tool; returns the steps' prefill tokens.
int64_t StepUntilToolWait(RolloutEngine& engine, uint64_t id) {
  int64_t prefill = 0;
  for (int i = 0; i < 100 && engine.Find(id)->phase != SamplePhase::kToolWait; ++i) {
    auto stats = engine.Step();
    EXPECT_TRUE(stats.ok());
    prefill += stats->prefill_tokens;
  }
  EXPECT_EQ(engine.Find(id)->phase, SamplePhase::kToolWait);
  return prefill;
}

TEST(MultiTurnTest, AppendPrefillsOnlyTheNewTokensAndContinues) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  ASSERT_TRUE(engine->Add(ToolRequest(1, 61)).ok());
  EXPECT_EQ(StepUntilToolWait(*engine, 1), 8);  // the prompt
  const std::vector<int64_t> result = {5, 6, 7, 8, 9};
  for (int turn = 0; turn < 3; ++turn) {
    const int64_t before = engine->Find(1)->length();
    EXPECT_EQ(engine->CachedTokens(1), before - 1);  // KV kept while waiting
    ASSERT_TRUE(engine->Append(1, result).ok());
    // Only the last generated token and the tool result are fed.
    EXPECT_EQ(StepUntilToolWait(*engine, 1), 1 + static_cast<int64_t>(result.size()));
    const SampleState* s = engine->Find(1);
    EXPECT_EQ(s->length(), before + 6);
    for (int64_t t = before; t < before + 5; ++t) {
      EXPECT_EQ(s->loss_mask[t], 0);
      EXPECT_EQ(s->versions[t], -1);
    }
    EXPECT_EQ(s->loss_mask[before + 5], 1);
  }
  // The continued cache is the one a single forward over everything gives.
  auto dropped = engine->Drop(1);
  ASSERT_TRUE(dropped.ok());
  auto expected = testing::ScoreLogprobs(*model, dropped->tokens);
  int64_t checked = 0;
  for (int64_t t = 0; t < dropped->length(); ++t) {
    if (!dropped->loss_mask[t]) continue;
    EXPECT_NEAR(dropped->logprobs[t], expected[t], 2e-4) << t;
    ++checked;
  }
  EXPECT_EQ(checked, 4);
  EXPECT_EQ(engine->pool().used_blocks(), 0);
}

TEST(MultiTurnTest, StopSequencesOnlyMatchTheCurrentTurn) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  SampleRequest r = ToolRequest(1, 61);
  ASSERT_TRUE(engine->Add(r).ok());
  StepUntilToolWait(*engine, 1);
  ASSERT_TRUE(engine->Append(1, {4, 4}).ok());
  EXPECT_EQ(engine->Find(1)->turn_start, engine->Find(1)->length());
  EXPECT_EQ(engine->Find(1)->finish, FinishReason::kNone);
}

TEST(MultiTurnTest, AppendErrors) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  EXPECT_EQ(engine->Append(9, {1}).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(engine->Add(Request(2, Prompt(2, 4), 10)).ok());
  EXPECT_EQ(engine->Append(2, {1}).code(), absl::StatusCode::kFailedPrecondition);
  SampleRequest r = ToolRequest(1, 61);
  r.stop.max_context = 20;
  ASSERT_TRUE(engine->Add(r).ok());
  StepUntilToolWait(*engine, 1);
  EXPECT_EQ(engine->Append(1, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Append(1, {61}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Append(1, std::vector<int64_t>(11, 1)).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(engine->Find(1)->phase, SamplePhase::kToolWait);  // unchanged by the failures
}

TEST(MultiTurnTest, ToolWaitingSamplesGiveUpTheirKvWhenThePoolIsNeeded) {
  auto model = SmallModel();
  EngineOptions options;
  options.pool_tokens = 64;
  options.block_size = 8;
  options.preemption = PreemptionPolicy::kSwap;
  auto engine = MakeEngine(*model, options);
  SampleRequest waiting = ToolRequest(1, 61);
  waiting.prompt = Prompt(1, 40);
  ASSERT_TRUE(engine->Add(waiting).ok());
  StepUntilToolWait(*engine, 1);
  ASSERT_TRUE(engine->Add(Request(2, Prompt(2, 30), 10)).ok());  // needs more than is free
  auto done = testing::RunToEnd(*engine);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].finish, FinishReason::kMaxNewTokens);
  EXPECT_EQ(engine->CachedTokens(1), 0);  // swapped to host
  ASSERT_TRUE(engine->Append(1, {3}).ok());
  StepUntilToolWait(*engine, 1);  // swapped back in and continued
  EXPECT_EQ(engine->CachedTokens(1), engine->Find(1)->length() - 1);
}

}  // namespace
}  // namespace loom::rollout
