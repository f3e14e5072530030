// Dispatch rules, driven step by step: when each policy sends the next
// prompt, how a prompt is split into effort subgroups, warm-up dropping and
// option errors.

#include <gtest/gtest.h>

#include <set>

#include "dispatch/fake_engine.h"
#include "loom/dispatch/dispatcher.h"

namespace loom::dispatch {
namespace {

// Efforts 25 and 100 with 2 samples each: groups of 4; room for 3 prompts.
DispatchOptions Options(const std::string& policy) {
  DispatchOptions o;
  o.policy = policy;
  o.max_inflight = 12;
  o.batch_samples = 8;
  o.max_staleness = 100;
  o.efforts = {{25, 2}, {100, 2}};
  o.datasets = {{"arith", 1.0, 0}};
  o.seed = 3;
  return o;
}

std::unique_ptr<Dispatcher> Make(const DispatchOptions& options) {
  auto dispatcher = Dispatcher::Create(options);
  EXPECT_TRUE(dispatcher.ok()) << dispatcher.status();
  return std::move(*dispatcher);
}

// Sample ids of prompt p (admission order), in subgroup order.
std::vector<uint64_t> SamplesOf(const FakeEngine& engine, size_t p) {
  std::vector<uint64_t> ids;
  for (const auto& subgroup : engine.admitted()[p].subgroups) {
    for (const auto& ticket : subgroup.samples) ids.push_back(ticket.sample_id);
  }
  return ids;
}

FakeEngine Engine() {
  return FakeEngine([](uint64_t) { return 1000; });
}

TEST(PolicyTest, SampleLevelDispatchesExactlyWhenFinishesReachGroupSize) {
  auto engine = Engine();
  auto d = Make(Options("sample"));
  EXPECT_EQ(d->Refill(engine), 3);
  EXPECT_EQ(d->inflight(), 12);
  // Finishes from different prompts: the 4th one (= group size) frees a prompt.
  const std::vector<uint64_t> order = {SamplesOf(engine, 0)[0], SamplesOf(engine, 1)[3],
                                       SamplesOf(engine, 2)[1], SamplesOf(engine, 0)[2],
                                       SamplesOf(engine, 1)[0], SamplesOf(engine, 2)[2],
                                       SamplesOf(engine, 2)[3], SamplesOf(engine, 1)[1]};
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(d->OnSampleFinished(order[i]), Disposition::kKeep);
    EXPECT_EQ(d->Refill(engine), (i % 4 == 3) ? 1 : 0) << "after finish " << i + 1;
  }
  EXPECT_EQ(d->inflight(), 12);  // held constant
}

TEST(PolicyTest, PromptLevelWaitsForAWholeGroup) {
  auto engine = Engine();
  auto d = Make(Options("prompt"));
  d->Refill(engine);
  for (size_t p = 0; p < 3; ++p) d->OnSampleFinished(SamplesOf(engine, p)[0]);
  d->OnSampleFinished(SamplesOf(engine, 1)[1]);
  EXPECT_EQ(d->Refill(engine), 0);  // 4 finished, but no group complete
  d->OnSampleFinished(SamplesOf(engine, 0)[1]);
  d->OnSampleFinished(SamplesOf(engine, 0)[2]);
  EXPECT_EQ(d->Refill(engine), 0);
  d->OnSampleFinished(SamplesOf(engine, 0)[3]);
  EXPECT_EQ(d->Refill(engine), 1);
  EXPECT_EQ(d->inflight(), 12 - 7 + 4);  // finished slots of partial groups stay idle
}

TEST(PolicyTest, BatchLevelRefillsAfterBatchSamplesFinish) {
  auto engine = Engine();
  auto d = Make(Options("batch"));
  d->Refill(engine);
  std::vector<uint64_t> all;
  for (size_t p = 0; p < 3; ++p) {
    for (uint64_t id : SamplesOf(engine, p)) all.push_back(id);
  }
  for (int i = 0; i < 7; ++i) {
    d->OnSampleFinished(all[i]);
    EXPECT_EQ(d->Refill(engine), 0);
  }
  d->OnSampleFinished(all[7]);
  EXPECT_EQ(d->Refill(engine), 2);
}

TEST(PolicyTest, SyncGeneratesOneBatchAndTrainsOnlyWhenIdle) {
  auto engine = Engine();
  auto d = Make(Options("sync"));
  EXPECT_EQ(d->Refill(engine), 2);  // batch_samples 8 = 2 groups
  auto ids0 = SamplesOf(engine, 0), ids1 = SamplesOf(engine, 1);
  for (uint64_t id : ids0) d->OnSampleFinished(id);
  for (int i = 0; i < 3; ++i) d->OnSampleFinished(ids1[i]);
  EXPECT_FALSE(d->TakeBatch(0).has_value());  // one sample still generating
  EXPECT_EQ(d->Refill(engine), 0);
  d->OnSampleFinished(ids1[3]);
  EXPECT_EQ(d->Refill(engine), 0);  // finished but not trained on yet
  auto batch = d->TakeBatch(0);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->size(), 4u);  // 2 prompts x 2 efforts
  engine.BumpVersion();
  EXPECT_EQ(d->Refill(engine), 2);
  EXPECT_EQ(engine.admitted().back().version, 1);
}

TEST(PolicyTest, EachPromptGoesOutAsOneSubgroupPerEffort) {
  auto engine = Engine();
  auto options = Options("sample");
  options.efforts = {{25, 1}, {50, 2}, {100, 3}};
  auto d = Make(options);
  EXPECT_EQ(d->Refill(engine), 2);
  std::set<uint64_t> ids;
  for (size_t p = 0; p < 2; ++p) {
    const PromptGroup& group = engine.admitted()[p];
    EXPECT_EQ(group.problem_index, p);
    ASSERT_EQ(group.subgroups.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_EQ(group.subgroups[s].effort, options.efforts[s].effort);
      EXPECT_EQ(group.subgroups[s].samples.size(), static_cast<size_t>(options.efforts[s].samples));
      for (const auto& t : group.subgroups[s].samples) {
        EXPECT_EQ(t.effort, group.subgroups[s].effort);
        EXPECT_EQ(t.subgroup_id, group.subgroups[s].id);
        ids.insert(t.sample_id);
      }
    }
  }
  EXPECT_EQ(ids.size(), 12u);
}

TEST(PolicyTest, SubgroupIsReadyWhenAllItsSamplesFinished) {
  auto engine = Engine();
  auto options = Options("sample");
  options.batch_samples = 2;
  auto d = Make(options);
  d->Refill(engine);
  auto ids = SamplesOf(engine, 0);  // subgroups: {ids[0], ids[1]} effort 25, {ids[2], ids[3]}
  d->OnSampleFinished(ids[0]);
  d->OnSampleFinished(ids[2]);
  EXPECT_EQ(d->ready_samples(), 0);
  EXPECT_FALSE(d->TakeBatch(0).has_value());
  d->OnSampleFinished(ids[3]);
  auto batch = d->TakeBatch(0);
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ((*batch)[0].effort, 100);
  EXPECT_EQ((*batch)[0].sample_ids, (std::vector<uint64_t>{ids[2], ids[3]}));
  EXPECT_EQ((*batch)[0].prompt_id, engine.admitted()[0].prompt_id);
}

TEST(PolicyTest, WarmupDropsTheGroupsOfTheFirstFinishes) {
  auto engine = Engine();
  auto options = Options("sample");
  options.warmup_drop_samples = 2;
  options.batch_samples = 2;
  auto d = Make(options);
  d->Refill(engine);
  auto p0 = SamplesOf(engine, 0), p1 = SamplesOf(engine, 1), p2 = SamplesOf(engine, 2);
  EXPECT_EQ(d->OnSampleFinished(p0[0]), Disposition::kDrop);  // finish 1: prompt 0 dropped
  EXPECT_EQ(d->OnSampleFinished(p0[1]), Disposition::kDrop);  // finish 2: same prompt
  EXPECT_EQ(d->OnSampleFinished(p1[0]), Disposition::kKeep);  // warm-up over
  EXPECT_EQ(d->OnSampleFinished(p0[2]), Disposition::kDrop);  // prompt 0 stays dropped
  EXPECT_EQ(d->OnSampleFinished(p0[3]), Disposition::kDrop);
  EXPECT_FALSE(d->TakeBatch(0).has_value());  // prompt 0's subgroups never become ready
  d->OnSampleFinished(p1[1]);
  auto batch = d->TakeBatch(0);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ((*batch)[0].prompt_id, engine.admitted()[1].prompt_id);
  EXPECT_EQ(d->TakeStats().samples_dropped, 4);
  (void)p2;
}

TEST(PolicyTest, ImpossibleOptionsAreClearErrors) {
  auto options = Options("sample");
  options.max_inflight = 3;
  EXPECT_NE(Dispatcher::Create(options).status().message().find("exceeds async.max_inflight"),
            std::string::npos);
  options = Options("sample");
  options.datasets[0].max_inflight = 2;
  EXPECT_NE(Dispatcher::Create(options).status().message().find("could never be dispatched"),
            std::string::npos);
  options = Options("sample");
  options.datasets[0].weight = 0;
  EXPECT_NE(Dispatcher::Create(options).status().message().find("weight > 0"), std::string::npos);
  options = Options("sync");
  options.batch_samples = 13;
  EXPECT_NE(Dispatcher::Create(options).status().message().find("sync"), std::string::npos);
  EXPECT_FALSE(Dispatcher::Create(Options("eager")).ok());
}

TEST(PolicyTest, OptionsFromConfig) {
  config::AsyncSection async;
  async.dispatch = "prompt";
  async.max_inflight = 40;
  config::EffortSection effort;
  effort.levels = {25, 50, 100};
  effort.samples_per_level = {4};
  config::TasksSection tasks;
  tasks.datasets.resize(2);
  tasks.datasets[0].name = "a";
  tasks.datasets[1].name = "b";
  tasks.datasets[1].max_inflight = 24;
  auto options = DispatchOptions::FromConfig(async, effort, tasks, 9);
  EXPECT_EQ(options.policy, "prompt");
  ASSERT_EQ(options.efforts.size(), 3u);
  EXPECT_EQ(options.efforts[2].effort, 100);
  EXPECT_EQ(options.efforts[2].samples, 4);
  EXPECT_EQ(options.datasets[1].max_inflight, 24);
  auto d = Make(options);
  EXPECT_EQ(d->group_size(), 12);
}

}  // namespace
}  // namespace loom::dispatch

namespace loom::dispatch {
namespace {

// Several ranks: rank r admits every R-th group of the one-rank stream, with
// the same prompt, subgroup and sample ids and the same problem indices.
TEST(PolicyTest, RanksDealTheOneRankStreamRoundRobin) {
  constexpr int kRanks = 3, kGroups = 9;
  DispatchOptions single = Options("sync");
  single.max_inflight = single.batch_samples = 4 * kGroups;
  single.datasets = {{"arith", 1.0, 0}, {"sort", 2.0, 0}};
  FakeEngine whole = Engine();
  Make(single)->Refill(whole);
  ASSERT_EQ(whole.admitted().size(), static_cast<size_t>(kGroups));
  std::set<int> datasets;
  for (const PromptGroup& group : whole.admitted()) datasets.insert(group.dataset);
  ASSERT_EQ(datasets.size(), 2u) << "the stream must mix both datasets";
  for (int rank = 0; rank < kRanks; ++rank) {
    DispatchOptions share = single;
    share.max_inflight = share.batch_samples = 4 * kGroups / kRanks;
    share.rank = rank;
    share.ranks = kRanks;
    FakeEngine engine = Engine();
    Make(share)->Refill(engine);
    ASSERT_EQ(engine.admitted().size(), static_cast<size_t>(kGroups / kRanks));
    for (size_t k = 0; k < engine.admitted().size(); ++k) {
      const PromptGroup& mine = engine.admitted()[k];
      const PromptGroup& expected = whole.admitted()[k * kRanks + static_cast<size_t>(rank)];
      EXPECT_EQ(mine.prompt_id, expected.prompt_id);
      EXPECT_EQ(mine.dataset, expected.dataset);
      EXPECT_EQ(mine.problem_index, expected.problem_index);
      EXPECT_EQ(SamplesOf(engine, k), SamplesOf(whole, k * kRanks + static_cast<size_t>(rank)));
      for (size_t s = 0; s < mine.subgroups.size(); ++s) {
        EXPECT_EQ(mine.subgroups[s].id, expected.subgroups[s].id);
      }
    }
  }
  DispatchOptions bad = single;
  bad.rank = 2;
  bad.ranks = 2;
  EXPECT_EQ(Dispatcher::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// Resuming on fewer ranks: a rank takes over the groups of a rank that is
// gone, and every rank continues the one-rank stream from the furthest point
// any rank reached, with the new stride: the very groups (dataset, problem,
// ids) one rank would make there, so no id is given twice.
TEST(PolicyTest, FewerRanksTakeOverTheGoneRanksGroupsAndContinueTheStream) {
  constexpr int kGroups = 20;
  DispatchOptions single = Options("sample");
  single.max_inflight = single.batch_samples = 4 * kGroups;
  single.datasets = {{"arith", 1.0, 0}, {"sort", 2.0, 0}};
  FakeEngine whole = Engine();
  Make(single)->Refill(whole);
  ASSERT_EQ(whole.admitted().size(), static_cast<size_t>(kGroups));

  // Three ranks, which had dispatched 2, 1 and 3 groups when they stopped.
  const size_t made[] = {2, 1, 3};
  std::vector<nlohmann::json> states;
  std::vector<std::vector<uint64_t>> held(3);  // each old rank's sample ids
  for (int rank = 0; rank < 3; ++rank) {
    DispatchOptions share = single;
    share.max_inflight = 4 * static_cast<int>(made[rank]);
    share.batch_samples = 4;
    share.rank = rank;
    share.ranks = 3;
    FakeEngine engine = Engine();
    auto dispatcher = Make(share);
    dispatcher->Refill(engine);
    ASSERT_EQ(engine.admitted().size(), made[rank]);
    for (size_t k = 0; k < made[rank]; ++k) {
      for (uint64_t id : SamplesOf(engine, k)) held[rank].push_back(id);
    }
    states.push_back(dispatcher->ExportState());
  }
  std::set<uint64_t> old_ids;
  for (const auto& ids : held) old_ids.insert(ids.begin(), ids.end());

  // Two ranks now: rank 0 takes over rank 2's groups; rank 2 went furthest
  // (3 rounds of 3 groups), so both go on from group 9 of the stream.
  for (int rank = 0; rank < 2; ++rank) {
    DispatchOptions share = single;
    share.max_inflight = share.batch_samples = 4 * kGroups / 2;
    share.rank = rank;
    share.ranks = 2;
    auto dispatcher = Make(share);
    ASSERT_TRUE(dispatcher->ImportState(states[rank]).ok());
    std::vector<uint64_t> mine = held[rank];
    if (rank == 0) {
      ASSERT_TRUE(dispatcher->AdoptState(states[2]).ok());
      mine.insert(mine.end(), held[2].begin(), held[2].end());
      // Its own state again: every prompt would be held twice.
      EXPECT_TRUE(absl::IsDataLoss(dispatcher->AdoptState(states[0])));
    }
    ASSERT_TRUE(dispatcher->ContinueStreamOf(states[2]).ok());
    EXPECT_EQ(dispatcher->inflight(), static_cast<int64_t>(mine.size()));
    for (uint64_t id : mine) dispatcher->OnSampleFinished(id);
    EXPECT_EQ(dispatcher->inflight(), 0);
    EXPECT_EQ(dispatcher->ready_samples(), static_cast<int64_t>(mine.size()));

    FakeEngine engine = Engine();
    dispatcher->Refill(engine);
    ASSERT_FALSE(engine.admitted().empty());
    for (size_t k = 0; k < engine.admitted().size(); ++k) {
      const PromptGroup& group = engine.admitted()[k];
      const size_t g = 9 + 2 * k + static_cast<size_t>(rank);
      ASSERT_LT(g, whole.admitted().size());
      EXPECT_EQ(group.prompt_id, whole.admitted()[g].prompt_id)
          << "rank " << rank << " group " << k;
      EXPECT_EQ(group.dataset, whole.admitted()[g].dataset);
      EXPECT_EQ(group.problem_index, whole.admitted()[g].problem_index);
      EXPECT_EQ(SamplesOf(engine, k), SamplesOf(whole, g));
      for (uint64_t id : SamplesOf(engine, k)) EXPECT_FALSE(old_ids.count(id)) << id;
    }
  }

  // A state of another dataset list continues nothing.
  DispatchOptions one_dataset = Options("sample");
  FakeEngine engine = Engine();
  auto other = Make(one_dataset);
  other->Refill(engine);
  auto dispatcher = Make(single);
  EXPECT_TRUE(absl::IsDataLoss(dispatcher->ContinueStreamOf(other->ExportState())));
  EXPECT_TRUE(absl::IsDataLoss(dispatcher->AdoptState(other->ExportState())));
  EXPECT_EQ(dispatcher->inflight(), 0);
}

// BatchReady says what TakeBatch would do, and changes nothing.
TEST(PolicyTest, BatchReadyPredictsTakeBatch) {
  auto dispatcher = Make(Options("sample"));
  FakeEngine engine([](uint64_t id) { return static_cast<int>(id % 3) + 1; });
  int batches = 0, waits = 0;
  for (int round = 0; round < 40; ++round) {
    dispatcher->Refill(engine);
    for (uint64_t id : engine.Step()) dispatcher->OnSampleFinished(id);
    const bool ready = dispatcher->BatchReady(engine.PolicyVersion());
    EXPECT_EQ(dispatcher->BatchReady(engine.PolicyVersion()), ready);
    const int64_t samples = dispatcher->ready_samples();
    auto batch = dispatcher->TakeBatch(engine.PolicyVersion());
    EXPECT_EQ(batch.has_value(), ready) << "round " << round;
    if (!ready) {
      EXPECT_EQ(dispatcher->ready_samples(), samples);
    }
    if (batch) engine.BumpVersion();
    (batch ? batches : waits)++;
  }
  EXPECT_GT(batches, 3);
  EXPECT_GT(waits, 3);
}

}  // namespace
}  // namespace loom::dispatch
