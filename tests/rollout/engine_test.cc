// RolloutEngine basics: continuous batching, per-token records checked
// against the model's own teacher-forced scoring, request validation.

#include <algorithm>
#include <set>

#include "rollout/rollout_testing.h"

namespace loom::rollout {
namespace {

using testing::ById;
using testing::MakeEngine;
using testing::Prompt;
using testing::Request;
using testing::RunToEnd;
using testing::SmallModel;

TEST(RolloutEngineTest, SamplesJoinAndLeaveMidBatch) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  ASSERT_TRUE(engine->Add(Request(1, Prompt(1, 5), 3)).ok());
  ASSERT_TRUE(engine->Add(Request(2, Prompt(2, 7), 12)).ok());
  std::vector<SampleState> done;
  for (int step = 0; step < 40 && (engine->num_running() + engine->num_waiting()) > 0; ++step) {
    if (step == 1) {
      ASSERT_TRUE(engine->Add(Request(3, Prompt(3, 4), 5)).ok());
    }
    ASSERT_TRUE(engine->Step().ok());
    if (step == 1) {
      EXPECT_EQ(engine->num_running(), 3);  // joined while 1 and 2 decode
    }
    for (auto& s : engine->TakeFinished()) done.push_back(std::move(s));
  }
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].id, 1u);  // the short one left first while the others kept going
  for (const auto& s : done) {
    EXPECT_EQ(s.finish, FinishReason::kMaxNewTokens);
    EXPECT_EQ(s.generated, s.stop.max_new_tokens);
  }
  EXPECT_EQ(engine->pool().used_blocks(), 0);
}

TEST(RolloutEngineTest, LogprobsMatchTeacherForcedScoring) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  for (uint64_t id = 0; id < 4; ++id) {
    auto r = Request(id, Prompt(id, 6 + id), 10, 1.0);
    ASSERT_TRUE(engine->Add(r).ok());
  }
  auto done = RunToEnd(*engine);
  ASSERT_EQ(done.size(), 4u);
  for (const auto& s : done) {
    auto expected = testing::ScoreLogprobs(*model, s.tokens);
    for (int64_t t = s.prompt_length; t < s.length(); ++t) {
      EXPECT_EQ(s.loss_mask[t], 1);
      EXPECT_EQ(s.versions[t], 0);
      EXPECT_NEAR(s.logprobs[t], expected[t], 2e-4) << "sample " << s.id << " token " << t;
    }
  }
}

TEST(RolloutEngineTest, LogprobIsTakenAtTheTemperatureBeforeTruncation) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  auto r = Request(5, Prompt(5, 6), 6, 0.5);
  r.sampling.top_k = 3;
  ASSERT_TRUE(engine->Add(r).ok());
  auto done = RunToEnd(*engine);
  ASSERT_EQ(done.size(), 1u);
  const SampleState& s = done[0];
  // Independent: full-vocab logits via Score at T=1, then log_softmax(logits/0.5).
  model::PackedBatch batch = model::TeacherForcingBatch({s.tokens});
  model::ScoreOptions options;
  std::vector<int64_t> rows;
  for (int64_t t = s.prompt_length - 1; t < s.length() - 1; ++t) rows.push_back(t);
  options.full_vocab_rows = at::tensor(rows, at::kLong);
  auto scored = model->Score(batch, options);
  ASSERT_TRUE(scored.ok()) << scored.status();
  at::Tensor tempered = at::log_softmax(scored->full_logprobs.to(at::kDouble) / 0.5, -1);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t t = rows[i] + 1;
    EXPECT_NEAR(s.logprobs[t], tempered[i][s.tokens[t]].item<double>(), 3e-4);
  }
}

TEST(RolloutEngineTest, TokensDoNotDependOnTheRestOfTheBatch) {
  auto model = SmallModel();
  auto alone = MakeEngine(*model);
  ASSERT_TRUE(alone->Add(Request(7, Prompt(7, 4 + 7 % 11), 16)).ok());
  auto solo = RunToEnd(*alone);
  auto crowd = MakeEngine(*model);
  for (uint64_t id = 0; id < 32; ++id) {
    ASSERT_TRUE(crowd->Add(Request(id, Prompt(id, 4 + id % 11), 16)).ok());
  }
  auto batch = RunToEnd(*crowd);
  ASSERT_EQ(batch.size(), 32u);
  EXPECT_EQ(ById(batch, 7)->tokens, solo[0].tokens);
}

TEST(RolloutEngineTest, GreedyTakesTheArgmax) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  ASSERT_TRUE(engine->Add(Request(1, Prompt(1, 6), 8, 0.0)).ok());
  auto done = RunToEnd(*engine);
  ASSERT_EQ(done.size(), 1u);
  auto expected = testing::ScoreLogprobs(*model, done[0].tokens);
  // A greedy token has the highest log-prob, which is > log(1/2) or at least
  // the recorded one equals the scored one.
  for (int64_t t = done[0].prompt_length; t < done[0].length(); ++t) {
    EXPECT_NEAR(done[0].logprobs[t], expected[t], 2e-4);
  }
  EXPECT_EQ(done[0].rng.counter(), 0u);  // greedy draws nothing
}

TEST(RolloutEngineTest, MoeRoutingIsRecordedForEveryFedToken) {
  auto model = SmallModel("qwen3_moe");
  auto engine = MakeEngine(*model);
  ASSERT_TRUE(engine->Add(Request(1, Prompt(1, 6), 6)).ok());
  auto done = RunToEnd(*engine);
  ASSERT_EQ(done.size(), 1u);
  const SampleState& s = done[0];
  ASSERT_EQ(s.moe_layers, model->config().NumMoeLayers());
  EXPECT_EQ(s.routing_rows(), s.length() - 1);  // the last token was never fed
  auto scored = model->Score(model::TeacherForcingBatch({s.tokens}));
  ASSERT_TRUE(scored.ok());
  at::Tensor recorded = s.RoutingTensor().narrow(0, 0, s.length() - 1).to(at::kLong);
  at::Tensor fresh = scored->routing.narrow(0, 0, s.length() - 1).to(at::kLong);
  // Same experts (as sets) per token and layer.
  EXPECT_TRUE(at::equal(std::get<0>(recorded.sort(-1)), std::get<0>(fresh.sort(-1))));
}

TEST(RolloutEngineTest, AddRejectsBadRequests) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  EXPECT_EQ(engine->Add(Request(1, {})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Add(Request(1, {3, 61})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Add(Request(1, {-1})).code(), absl::StatusCode::kInvalidArgument);
  auto r = Request(1, {1, 2});
  r.sampling.top_p = 0.0;
  EXPECT_EQ(engine->Add(r).code(), absl::StatusCode::kInvalidArgument);
  r = Request(1, {1, 2});
  r.sampling.temperature = -1;
  EXPECT_EQ(engine->Add(r).code(), absl::StatusCode::kInvalidArgument);
  r = Request(1, {1, 2});
  r.stop.stop_sequences = {{}};
  EXPECT_EQ(engine->Add(r).code(), absl::StatusCode::kInvalidArgument);
  r = Request(1, Prompt(1, 10));
  r.stop.max_context = 10;
  EXPECT_EQ(engine->Add(r).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine->Add(Request(1, {1, 2})).ok());
  EXPECT_EQ(engine->Add(Request(1, {1, 2})).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(engine->num_samples(), 1);
}

TEST(RolloutEngineTest, CreateRejectsBadOptions) {
  auto model = SmallModel();
  EngineOptions options;
  options.max_batch = 0;
  EXPECT_EQ(RolloutEngine::Create(*model, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RolloutEngineTest, DropFreesBlocksAtOnce) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  ASSERT_TRUE(engine->Add(Request(1, Prompt(1, 40), 50)).ok());
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_GT(engine->pool().used_blocks(), 0);
  auto dropped = engine->Drop(1);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(dropped->finish, FinishReason::kDropped);
  EXPECT_EQ(engine->pool().used_blocks(), 0);
  EXPECT_EQ(engine->Drop(1).status().code(), absl::StatusCode::kNotFound);
}

TEST(RolloutEngineTest, LongPromptsArePrefilledInChunksUnderTheBudget) {
  auto model = SmallModel();
  EngineOptions options;
  options.step_token_budget = 16;
  auto engine = MakeEngine(*model, options);
  ASSERT_TRUE(engine->Add(Request(1, Prompt(1, 50), 4)).ok());
  ASSERT_TRUE(engine->Add(Request(2, Prompt(2, 3), 20)).ok());
  int64_t max_fed = 0;
  for (int i = 0; i < 10; ++i) {
    auto stats = engine->Step();
    ASSERT_TRUE(stats.ok());
    max_fed = std::max(max_fed, stats->prefill_tokens + stats->decode_tokens);
  }
  EXPECT_LE(max_fed, 16);
  auto done = RunToEnd(*engine);
  ASSERT_EQ(done.size(), 2u);
  auto expected = testing::ScoreLogprobs(*model, ById(done, 1)->tokens);
  EXPECT_NEAR(ById(done, 1)->logprobs[50], expected[50], 2e-4);  // chunked prefill is exact
}

}  // namespace
}  // namespace loom::rollout
