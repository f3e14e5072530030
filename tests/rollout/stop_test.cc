// Every completion reason, on greedy generations whose tokens are known from
// an unconstrained reference run.

#include <algorithm>

#include "rollout/rollout_testing.h"

namespace loom::rollout {
namespace {

using testing::MakeEngine;
using testing::Prompt;
using testing::Request;
using testing::RunToEnd;
using testing::SmallModel;

class StopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = SmallModel();
    auto engine = MakeEngine(*model_);
    ASSERT_TRUE(engine->Add(Base()).ok());
    auto done = RunToEnd(*engine);
    ASSERT_EQ(done.size(), 1u);
    generated_.assign(done[0].tokens.begin() + kPrompt, done[0].tokens.end());
    ASSERT_EQ(generated_.size(), 12u);
  }
  SampleRequest Base() const { return Request(1, Prompt(1, kPrompt), 12, 0.0); }
  // Runs `request` alone; returns the final state (finished or tool-waiting).
  SampleState Run(const SampleRequest& request, RolloutEngine** keep = nullptr) {
    engine_ = MakeEngine(*model_);
    EXPECT_TRUE(engine_->Add(request).ok());
    auto done = RunToEnd(*engine_);
    if (keep) *keep = engine_.get();
    if (!done.empty()) return done[0];
    return *engine_->Find(request.id);
  }
  // Index in generated_ of the first occurrence of `token`.
  size_t First(int64_t token) const {
    return std::find(generated_.begin(), generated_.end(), token) - generated_.begin();
  }

  static constexpr int64_t kPrompt = 6;
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<RolloutEngine> engine_;
  std::vector<int64_t> generated_;
};

TEST_F(StopTest, Eos) {
  auto r = Base();
  r.stop.eos_token_ids = {generated_[4]};
  SampleState s = Run(r);
  EXPECT_EQ(s.finish, FinishReason::kEos);
  EXPECT_EQ(s.generated, static_cast<int64_t>(First(generated_[4]) + 1));
  EXPECT_EQ(s.tokens.back(), generated_[4]);
}

// Where a two-token sequence first ends inside generated_ (1-based count).
size_t SequenceEnd(const std::vector<int64_t>& g, const std::vector<int64_t>& seq) {
  for (size_t i = 1; i < g.size(); ++i) {
    if (g[i - 1] == seq[0] && g[i] == seq[1]) return i + 1;
  }
  return 0;
}

TEST_F(StopTest, StopSequence) {
  auto r = Base();
  r.stop.stop_sequences = {{generated_[5], generated_[6]}};
  SampleState s = Run(r);
  EXPECT_EQ(s.finish, FinishReason::kStopSequence);
  EXPECT_EQ(s.generated,
            static_cast<int64_t>(SequenceEnd(generated_, r.stop.stop_sequences[0])));
}

TEST_F(StopTest, StopSequenceDoesNotMatchAcrossThePrompt) {
  auto r = Base();
  r.stop.stop_sequences = {{r.prompt.back(), generated_[0]}};
  SampleState s = Run(r);
  const size_t end = SequenceEnd(generated_, r.stop.stop_sequences[0]);
  if (end == 0) {
    EXPECT_EQ(s.finish, FinishReason::kMaxNewTokens);
  } else {
    EXPECT_EQ(s.generated, static_cast<int64_t>(end));
  }
  EXPECT_GT(s.generated, 1);
}

TEST_F(StopTest, ToolCallEndParksHoldingTheKv) {
  auto r = Base();
  r.stop.tool_call_end = {{generated_[2], generated_[3]}};
  RolloutEngine* engine = nullptr;
  SampleState s = Run(r, &engine);
  EXPECT_EQ(s.finish, FinishReason::kToolCall);
  EXPECT_EQ(s.phase, SamplePhase::kToolWait);
  EXPECT_EQ(s.generated, static_cast<int64_t>(SequenceEnd(generated_, r.stop.tool_call_end[0])));
  EXPECT_EQ(engine->CachedTokens(1), s.length() - 1);
  EXPECT_GT(engine->pool().used_blocks(), 0);
}

TEST_F(StopTest, MaxTurnTokensParksEachTurn) {
  auto r = Base();
  r.stop.max_turn_tokens = 3;
  RolloutEngine* engine = nullptr;
  SampleState s = Run(r, &engine);
  EXPECT_EQ(s.finish, FinishReason::kToolCall);
  EXPECT_EQ(s.phase, SamplePhase::kToolWait);
  EXPECT_EQ(s.generated, 3);
  // The cap counts the current turn only: after an append, 3 more.
  ASSERT_TRUE(engine->Append(1, {5, 6}).ok());
  for (int i = 0; i < 20 && engine->Find(1)->phase != SamplePhase::kToolWait; ++i) {
    ASSERT_TRUE(engine->Step().ok());
  }
  EXPECT_EQ(engine->Find(1)->phase, SamplePhase::kToolWait);
  EXPECT_EQ(engine->Find(1)->generated, 6);
}

TEST_F(StopTest, MaxNewTokens) {
  auto r = Base();
  r.stop.max_new_tokens = 3;
  SampleState s = Run(r);
  EXPECT_EQ(s.finish, FinishReason::kMaxNewTokens);
  EXPECT_EQ(s.generated, 3);
  EXPECT_EQ(std::vector<int64_t>(s.tokens.begin() + kPrompt, s.tokens.end()),
            std::vector<int64_t>(generated_.begin(), generated_.begin() + 3));
}

TEST_F(StopTest, ContextLimitFromTheRequest) {
  auto r = Base();
  r.stop.max_context = kPrompt + 4;
  SampleState s = Run(r);
  EXPECT_EQ(s.finish, FinishReason::kContextLimit);
  EXPECT_EQ(s.length(), kPrompt + 4);
}

TEST_F(StopTest, ContextLimitFromTheModel) {
  auto r = Request(2, Prompt(2, 505), 100, 0.0);  // the model has 512 positions
  SampleState s = Run(r);
  EXPECT_EQ(s.finish, FinishReason::kContextLimit);
  EXPECT_EQ(s.length(), 512);
}

}  // namespace
}  // namespace loom::rollout
