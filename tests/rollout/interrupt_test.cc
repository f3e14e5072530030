// Token-level interruption and resume after a weight update: keep (reuse the
// KV as it is) and recompute (re-prefill with the new weights), and what a
// MoE sample's recorded routing holds across the update.

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "rollout/rollout_testing.h"

namespace loom::rollout {
namespace {

using testing::MakeEngine;
using testing::Prompt;
using testing::Request;
using testing::RunToEnd;
using testing::SmallModel;

void AddSamples(RolloutEngine& engine, int n, int64_t max_new = 40) {
  for (int id = 0; id < n; ++id) {
    ASSERT_TRUE(engine.Add(Request(id, Prompt(id, 5 + id % 7), max_new)).ok());
  }
}

// No sample is left running: those in the batch are parked, the others are
// finished or still queued for admission (an interrupt that comes before
// the engine admitted them, under load, finds them there; they hold no KV on
// the device and start after Resume).
void ExpectAllParked(const RolloutEngine& engine, int n) {
  for (int id = 0; id < n; ++id) {
    const SampleState* s = engine.Find(id);
    ASSERT_NE(s, nullptr);
    EXPECT_NE(s->phase, SamplePhase::kRunning) << id;
    EXPECT_NE(s->phase, SamplePhase::kToolWait) << id;
  }
}

TEST(InterruptTest, RequestFromAnotherThreadParksWithinOneStep) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  AddSamples(*engine, 16, 400);
  std::mt19937 gen(3);
  for (int round = 0; round < 15; ++round) {
    const auto delay = std::chrono::microseconds(gen() % 3000);
    std::thread requester([&] {
      std::this_thread::sleep_for(delay);
      engine->RequestInterrupt();
    });
    int64_t steps = 0;
    while (true) {
      auto stats = engine->Step();
      ASSERT_TRUE(stats.ok());
      if (stats->parked) break;
      ++steps;
    }
    requester.join();
    EXPECT_LE(engine->counters().last_interrupt_steps, 1) << "round " << round;
    ExpectAllParked(*engine, 16);
    ASSERT_TRUE(engine->Resume(engine->policy_version()).ok());
  }
  EXPECT_EQ(engine->counters().interrupts, 15);
}

TEST(InterruptTest, InterruptAtRandomStepsParksEverySampleAtATokenBoundary) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  AddSamples(*engine, 12, 60);
  std::mt19937 gen(5);
  for (int round = 0; round < 6; ++round) {
    const int steps = 1 + gen() % 6;
    for (int i = 0; i < steps; ++i) ASSERT_TRUE(engine->Step().ok());
    std::vector<int64_t> lengths;
    for (int id = 0; id < 12; ++id) lengths.push_back(engine->Find(id)->length());
    engine->RequestInterrupt();
    auto stats = engine->Step();
    ASSERT_TRUE(stats.ok());
    EXPECT_TRUE(stats->parked);
    EXPECT_EQ(engine->counters().last_interrupt_steps, 0);  // asked between steps: no step taken
    ExpectAllParked(*engine, 12);
    for (int id = 0; id < 12; ++id) {
      const SampleState* s = engine->Find(id);
      EXPECT_EQ(s->length(), lengths[id]);  // nothing generated after the request
      if (s->phase == SamplePhase::kParked) {
        EXPECT_EQ(engine->CachedTokens(id), s->length() - 1);
      }
    }
    ASSERT_TRUE(engine->Step()->parked);  // parked engines do nothing
    ASSERT_TRUE(engine->Resume(engine->policy_version()).ok());
  }
}

// A pool block's K/V contents of layer 0, for checking reuse.
at::Tensor BlockContents(const RolloutEngine& engine, uint64_t id) {
  auto blocks = engine.BlockTable(id);
  std::vector<int64_t> ids(blocks.begin(), blocks.end());
  return engine.pool().key(0).index_select(0, at::tensor(ids, at::kLong)).clone();
}

TEST(InterruptTest, ResumeKeepReusesTheKvWithoutReprefill) {
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  AddSamples(*engine, 8, 20);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(engine->Step().ok());
  engine->ParkAll();
  std::vector<std::vector<int32_t>> tables;
  std::vector<at::Tensor> contents;
  std::vector<int64_t> lengths;
  for (int id = 0; id < 8; ++id) {
    tables.push_back(engine->BlockTable(id));
    contents.push_back(BlockContents(*engine, id));
    lengths.push_back(engine->Find(id)->length());
  }
  testing::PerturbWeights(*model, 9);
  ASSERT_TRUE(engine->Resume(1).ok());
  auto stats = engine->Step();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->prefill_tokens, 0);
  EXPECT_EQ(stats->decode_tokens, 8);
  for (int id = 0; id < 8; ++id) {
    auto table = engine->BlockTable(id);
    ASSERT_GE(table.size(), tables[id].size());
    EXPECT_TRUE(std::equal(tables[id].begin(), tables[id].end(), table.begin()));
    // The cached positions are untouched: old weights' K stays.
    at::Tensor now = BlockContents(*engine, id).narrow(0, 0, contents[id].size(0));
    at::Tensor before = contents[id];
    const int64_t bs = engine->pool().block_size();
    at::Tensor mask = at::arange(contents[id].size(0) * bs).lt(lengths[id] - 1);
    EXPECT_TRUE(at::equal(now.flatten(0, 1).index({mask}), before.flatten(0, 1).index({mask})));
  }
  auto done = RunToEnd(*engine);
  ASSERT_EQ(done.size(), 8u);
  for (const auto& s : done) {
    const int64_t boundary = lengths[s.id];
    for (int64_t t = s.prompt_length; t < s.length(); ++t) {
      EXPECT_EQ(s.versions[t], t < boundary ? 0 : 1);
    }
    ASSERT_EQ(s.segments.size(), 2u);
    EXPECT_EQ(s.segments[0].start, s.prompt_length);
    EXPECT_EQ(s.segments[1].start, boundary);
    EXPECT_EQ(s.segments[1].version, 1);
  }
}

TEST(InterruptTest, ResumeRecomputeReprefillsWithTheNewWeights) {
  auto model = SmallModel();
  EngineOptions options;
  options.on_weight_update = WeightUpdatePolicy::kRecompute;
  auto engine = MakeEngine(*model, options);
  AddSamples(*engine, 4, 16);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine->Step().ok());
  engine->ParkAll();
  int64_t total = 0;
  std::vector<int64_t> lengths;
  for (int id = 0; id < 4; ++id) {
    lengths.push_back(engine->Find(id)->length());
    total += lengths.back();
  }
  testing::PerturbWeights(*model, 11);
  ASSERT_TRUE(engine->Resume(1).ok());
  auto stats = engine->Step();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->prefill_tokens, total);  // every token fed again
  auto done = RunToEnd(*engine);
  ASSERT_EQ(done.size(), 4u);
  for (const auto& s : done) {
    // Tokens after the update were generated from a cache computed entirely
    // by the new weights: they match scoring the sequence with them.
    auto expected = testing::ScoreLogprobs(*model, s.tokens);
    for (int64_t t = lengths[s.id]; t < s.length(); ++t) {
      EXPECT_NEAR(s.logprobs[t], expected[t], 2e-4);
      EXPECT_EQ(s.versions[t], 1);
    }
  }
}

TEST(InterruptTest, KeepDiffersFromRecomputeAfterAWeightUpdate) {
  // keep continues on the old cache, so its next-token log-probs are not the
  // new model's teacher-forced ones (the point of recording versions).
  auto model = SmallModel();
  auto engine = MakeEngine(*model);
  ASSERT_TRUE(engine->Add(Request(1, Prompt(1, 30), 6, 0.0)).ok());
  ASSERT_TRUE(engine->Step().ok());
  engine->ParkAll();
  testing::PerturbWeights(*model, 12);
  ASSERT_TRUE(engine->Resume(1).ok());
  auto done = RunToEnd(*engine);
  auto expected = testing::ScoreLogprobs(*model, done[0].tokens);
  EXPECT_GT(std::abs(done[0].logprobs[31] - expected[31]), 1e-3);
}

TEST(InterruptTest, ResumeRejectsAnOlderVersion) {
  auto model = SmallModel();
  EngineOptions options;
  options.initial_version = 3;
  auto engine = MakeEngine(*model, options);
  engine->ParkAll();
  EXPECT_EQ(engine->Resume(2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(engine->Resume(3).ok());
}

TEST(InterruptTest, OffloadedParkedSamplesContinueExactly) {
  auto model = SmallModel();
  auto plain = MakeEngine(*model);
  auto offloaded = MakeEngine(*model);
  AddSamples(*plain, 6, 15);
  AddSamples(*offloaded, 6, 15);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(plain->Step().ok());
    ASSERT_TRUE(offloaded->Step().ok());
  }
  offloaded->ParkAll();
  offloaded->OffloadParked();
  EXPECT_EQ(offloaded->pool().used_blocks(), 0);
  ASSERT_TRUE(offloaded->Resume(0).ok());
  auto a = RunToEnd(*plain);
  auto b = RunToEnd(*offloaded);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (const auto& s : a) {
    EXPECT_EQ(testing::ById(b, s.id)->tokens, s.tokens);
    EXPECT_EQ(testing::ById(b, s.id)->logprobs, s.logprobs);
  }
}

// Experts per token and MoE layer, sorted (the order of a top-k is not part
// of the routing): [rows, moe_layers, top_k] int64.
at::Tensor ExpertSets(const at::Tensor& routing) {
  return std::get<0>(routing.to(at::kLong).sort(-1));
}

// Tokens whose experts differ between two [rows, moe_layers, top_k] routings.
int64_t RowsDiffering(const at::Tensor& a, const at::Tensor& b) {
  return (a != b).flatten(1).any(1).sum().item<int64_t>();
}

at::Tensor RecordedRouting(const SampleState& s, int64_t begin, int64_t end) {
  return ExpertSets(s.RoutingTensor().narrow(0, begin, end - begin));
}

// The routing of `tokens[split, end)` when `before` has cached tokens[0, split)
// and `after` computes the rest on that cache: what a sample resumed with its
// KV kept must record. A separate pool and Transformer::Step, not the engine.
at::Tensor RoutingOverCache(const model::Transformer& before, const model::Transformer& after,
                            const std::vector<int64_t>& tokens, int64_t split, int64_t end) {
  model::KvBlockPool pool(before.PoolOptions(static_cast<int64_t>(tokens.size()) + 16));
  model::KvSequence seq;
  auto prefix = before.Step({{&seq, {tokens.begin(), tokens.begin() + split}}}, pool);
  EXPECT_TRUE(prefix.ok()) << prefix.status();
  auto rest = after.Step({{&seq, {tokens.begin() + split, tokens.begin() + end}}}, pool);
  EXPECT_TRUE(rest.ok()) << rest.status();
  return ExpertSets(rest->routing);
}

// A MoE sample that spans a weight update: the routing recorded for the
// tokens fed before the update stays as it was (the trainer replays it
// against their behaviour log-probs), and every token fed after it carries
// the new weights' routing — over the old KV (keep) or a re-prefill with the
// new weights (recompute, which routes the old tokens again and must not
// overwrite them).
class MoeWeightUpdateTest : public ::testing::TestWithParam<WeightUpdatePolicy> {};

TEST_P(MoeWeightUpdateTest, OldTokensKeepTheirRoutingNewTokensGetTheNewWeights) {
  auto model = SmallModel("qwen3_moe");
  const auto old_model = SmallModel("qwen3_moe");  // same seed: the weights before the update
  EngineOptions options;
  options.on_weight_update = GetParam();
  auto engine = MakeEngine(*model, options);
  AddSamples(*engine, 4, 14);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine->Step().ok());
  engine->ParkAll();
  std::vector<int64_t> fed;  // tokens fed, and routed, under the old weights
  std::vector<std::vector<int16_t>> recorded;
  for (int id = 0; id < 4; ++id) {
    const SampleState* s = engine->Find(id);
    ASSERT_EQ(s->routing_rows(), s->length() - 1) << id;
    fed.push_back(s->routing_rows());
    recorded.push_back(s->routing);
  }
  testing::PerturbWeights(*model, 9);
  ASSERT_TRUE(engine->Resume(1).ok());
  auto done = RunToEnd(*engine);
  ASSERT_EQ(done.size(), 4u);

  int64_t old_rows_rerouted = 0, new_rows_rerouted = 0;
  for (const SampleState& s : done) {
    SCOPED_TRACE("sample " + std::to_string(s.id));
    const int64_t split = fed[s.id], end = s.length() - 1;
    ASSERT_EQ(s.routing_rows(), end);
    ASSERT_GT(end, split);
    // Before the update: the very rows recorded then, which are the old
    // weights' routing of those tokens.
    const std::vector<int16_t>& old_rows = recorded[s.id];
    EXPECT_TRUE(std::equal(old_rows.begin(), old_rows.end(), s.routing.begin()));
    auto old_scored = old_model->Score(model::TeacherForcingBatch({s.tokens}));
    auto new_scored = model->Score(model::TeacherForcingBatch({s.tokens}));
    ASSERT_TRUE(old_scored.ok() && new_scored.ok());
    const at::Tensor old_routing = ExpertSets(old_scored->routing);
    const at::Tensor new_routing = ExpertSets(new_scored->routing);
    EXPECT_TRUE(at::equal(RecordedRouting(s, 0, split), old_routing.narrow(0, 0, split)));
    // After it: the new weights' routing.
    const at::Tensor expected = GetParam() == WeightUpdatePolicy::kKeep
                                    ? RoutingOverCache(*old_model, *model, s.tokens, split, end)
                                    : new_routing.narrow(0, split, end - split);
    EXPECT_TRUE(at::equal(RecordedRouting(s, split, end), expected))
        << "recorded\n"
        << RecordedRouting(s, split, end) << "\nexpected\n"
        << expected;
    old_rows_rerouted +=
        RowsDiffering(old_routing.narrow(0, 0, split), new_routing.narrow(0, 0, split));
    new_rows_rerouted += RowsDiffering(expected, old_routing.narrow(0, split, end - split));
  }
  // The update must change routing on both sides of the boundary, or the
  // checks above could not tell old routing from new.
  EXPECT_GT(old_rows_rerouted, 0);
  EXPECT_GT(new_rows_rerouted, 0);
}

INSTANTIATE_TEST_SUITE_P(Policies, MoeWeightUpdateTest,
                         ::testing::Values(WeightUpdatePolicy::kKeep,
                                           WeightUpdatePolicy::kRecompute),
                         [](const auto& info) {
                           return info.param == WeightUpdatePolicy::kKeep ? "Keep" : "Recompute";
                         });

}  // namespace
}  // namespace loom::rollout
