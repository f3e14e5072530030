// The dispatcher in a long run against a fake engine with heavy-tailed
// response lengths: for every policy and staleness bound, caps and
// max_inflight hold after every refill, no trained subgroup is older than
// the bound, and training keeps making progress.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "dispatch/fake_engine.h"
#include "loom/dispatch/dispatcher.h"

namespace loom::dispatch {
namespace {

// Pareto-like: most samples take a few steps, a few take up to 300.
int HeavyTailLength(uint64_t id) {
  uint64_t x = id * 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ULL;
  const double u = (static_cast<double>((x ^ (x >> 32)) >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  return std::min(300, 1 + static_cast<int>(3.0 / std::pow(u, 1.1)));
}

DispatchOptions Options(const std::string& policy, int max_staleness) {
  DispatchOptions o;
  o.policy = policy;
  o.max_inflight = 48;
  o.batch_samples = 24;
  o.max_staleness = max_staleness;
  o.efforts = {{25, 2}, {75, 2}};
  o.datasets = {{"short", 3.0, 8}, {"long", 1.0, 0}};
  o.seed = 11;
  return o;
}

struct RunSummary {
  int64_t steps = 0;
  int64_t max_lag = 0;
  int64_t min_inflight_after_warmup = 1 << 30;
};

RunSummary Simulate(const DispatchOptions& options, int engine_steps) {
  FakeEngine engine(HeavyTailLength);
  auto created = Dispatcher::Create(options);
  EXPECT_TRUE(created.ok()) << created.status();
  Dispatcher& d = **created;
  RunSummary summary;
  for (int step = 0; step < engine_steps; ++step) {
    d.Refill(engine);
    EXPECT_LE(d.inflight(), options.max_inflight);
    EXPECT_EQ(static_cast<size_t>(d.inflight()), engine.active());
    for (size_t ds = 0; ds < options.datasets.size(); ++ds) {
      if (options.datasets[ds].max_inflight > 0) {
        EXPECT_LE(d.inflight(static_cast<int>(ds)), options.datasets[ds].max_inflight);
      }
    }
    if (summary.steps > 0) {
      summary.min_inflight_after_warmup = std::min(summary.min_inflight_after_warmup, d.inflight());
    }
    for (uint64_t id : engine.Step()) d.OnSampleFinished(id);
    // Train whenever allowed, as the run loop does between engine steps.
    while (auto batch = d.TakeBatch(engine.PolicyVersion())) {
      int64_t samples = 0;
      for (const auto& subgroup : *batch) {
        const int64_t lag = engine.PolicyVersion() - subgroup.oldest_version;
        EXPECT_LE(lag, options.max_staleness);
        summary.max_lag = std::max(summary.max_lag, lag);
        samples += static_cast<int64_t>(subgroup.sample_ids.size());
      }
      EXPECT_GE(samples, options.policy == "sync" ? 1 : options.batch_samples);
      engine.BumpVersion();
      ++summary.steps;
    }
  }
  return summary;
}

TEST(SimulationTest, EveryPolicyKeepsCapsAndStalenessAndMakesProgress) {
  for (const char* policy : {"sample", "prompt", "batch", "sync"}) {
    for (int staleness : {0, 1, 3}) {
      SCOPED_TRACE(std::string(policy) + " max_staleness=" + std::to_string(staleness));
      RunSummary summary = Simulate(Options(policy, staleness), 3000);
      EXPECT_GE(summary.steps, 10);  // the 300-step tail stalls the strict settings
      EXPECT_LE(summary.max_lag, staleness);
    }
  }
}

TEST(SimulationTest, BatchesLargerThanTheWorkingSetStillTrain) {
  for (const char* policy : {"sample", "prompt", "batch"}) {
    auto options = Options(policy, 0);
    options.max_inflight = 16;
    options.batch_samples = 40;
    EXPECT_GE(Simulate(options, 3000).steps, 3) << policy;  // no stall
  }
}

TEST(SimulationTest, SampleLevelOutpacesSyncOnLongTails) {
  // Counted in engine steps (each decodes every active sample once): sync
  // waits for each batch's longest sample, sample-level keeps the engine full.
  auto sync = Options("sync", 4);
  sync.max_inflight = sync.batch_samples;
  const int64_t sync_steps = Simulate(sync, 3000).steps;
  // Stragglers (1.5% of samples take 300 steps) hold each version back, so
  // the gain grows with max_staleness: about 2x at 1, 5x at 4 here.
  const int64_t sample_steps = Simulate(Options("sample", 4), 3000).steps;
  EXPECT_GE(2 * sample_steps, 5 * sync_steps) << sample_steps << " vs " << sync_steps;
}

TEST(SimulationTest, StalenessBoundIsReachedNotJustRespected) {
  // With room to run ahead, async policies do train on older samples.
  EXPECT_EQ(Simulate(Options("sample", 3), 3000).max_lag, 3);
}

TEST(SimulationTest, SampleLevelHoldsInflightWithinAGroupOfMax) {
  // A loose staleness bound so only the policy limits dispatch.
  auto options = Options("sample", 1000);
  options.datasets = {{"only", 1.0, 0}};
  RunSummary summary = Simulate(options, 3000);
  const int group = 4;
  EXPECT_GE(summary.min_inflight_after_warmup, options.max_inflight - group + 1);
}

TEST(SimulationTest, WeightsSteerTheMixWhenNoCapBinds) {
  auto options = Options("sample", 1000);
  options.datasets = {{"a", 3.0, 0}, {"b", 1.0, 0}};
  FakeEngine engine([](uint64_t) { return 2; });
  auto d = *Dispatcher::Create(options);
  int counts[2] = {0, 0};
  for (int step = 0; step < 2000; ++step) {
    d->Refill(engine);
    for (uint64_t id : engine.Step()) d->OnSampleFinished(id);
    while (d->TakeBatch(engine.PolicyVersion())) engine.BumpVersion();
  }
  for (const auto& group : engine.admitted()) ++counts[group.dataset];
  const double share = static_cast<double>(counts[0]) / (counts[0] + counts[1]);
  EXPECT_NEAR(share, 0.75, 0.03) << counts[0] << " vs " << counts[1];
}

// Live reconfiguration: a new mix applies to new dispatches only.
TEST(SimulationTest, ALoweredCapHoldsNewPromptsUntilInflightDrainsToIt) {
  auto options = Options("sample", 1000);
  options.datasets = {{"a", 1.0, 0}, {"b", 1.0, 0}};
  FakeEngine engine([](uint64_t id) { return 5 + static_cast<int>(id % 7); });
  auto d = *Dispatcher::Create(options);
  auto run = [&](int steps, auto&& check) {
    for (int step = 0; step < steps; ++step) {
      const size_t admitted_before = engine.admitted().size();
      d->Refill(engine);
      check(admitted_before);
      for (uint64_t id : engine.Step()) d->OnSampleFinished(id);
      while (d->TakeBatch(engine.PolicyVersion())) engine.BumpVersion();
    }
  };
  run(50, [](size_t) {});
  const int64_t before = d->inflight(1);
  ASSERT_GT(before, 8) << "dataset b must be above the new cap when it is lowered";
  ASSERT_TRUE(d->SetDatasets({{"a", 1.0, 0}, {"b", 1.0, 8}}).ok());
  int64_t last = before;
  bool reached = false;
  int b_dispatched = 0;
  run(400, [&](size_t admitted_before) {
    const int64_t now = d->inflight(1);
    if (!reached) {
      EXPECT_LE(now, last) << "b's in-flight only drains until it is under its new cap";
      reached = now <= 8;
    } else {
      EXPECT_LE(now, 8);
    }
    last = now;
    for (size_t g = admitted_before; g < engine.admitted().size(); ++g) {
      if (engine.admitted()[g].dataset != 1) continue;
      EXPECT_TRUE(reached) << "b dispatched before draining to its cap";
      ++b_dispatched;
    }
  });
  EXPECT_TRUE(reached);
  EXPECT_GT(b_dispatched, 0) << "b is still dispatched under its cap";
}

TEST(SimulationTest, AnInactiveDatasetStopsWhileItsInflightSamplesStillFinish) {
  auto options = Options("sample", 1000);
  options.datasets = {{"a", 1.0, 0}, {"b", 1.0, 0}};
  FakeEngine engine([](uint64_t id) { return 5 + static_cast<int>(id % 7); });
  auto d = *Dispatcher::Create(options);
  for (int step = 0; step < 50; ++step) {
    d->Refill(engine);
    for (uint64_t id : engine.Step()) d->OnSampleFinished(id);
    while (d->TakeBatch(engine.PolicyVersion())) engine.BumpVersion();
  }
  ASSERT_GT(d->inflight(1), 0);
  // Parked as the live config does it: weight 0.
  ASSERT_TRUE(d->SetDatasets({{"a", 1.0, 0}, {"b", 0.0, 0}}).ok());
  const size_t admitted_at_switch = engine.admitted().size();
  int64_t b_finished = 0;
  for (int step = 0; step < 100; ++step) {
    d->Refill(engine);
    for (uint64_t id : engine.Step()) {
      for (const auto& group : engine.admitted()) {
        for (const auto& subgroup : group.subgroups) {
          for (const auto& ticket : subgroup.samples) {
            if (ticket.sample_id == id && group.dataset == 1) ++b_finished;
          }
        }
      }
      d->OnSampleFinished(id);
    }
    while (d->TakeBatch(engine.PolicyVersion())) engine.BumpVersion();
  }
  for (size_t g = admitted_at_switch; g < engine.admitted().size(); ++g) {
    EXPECT_EQ(engine.admitted()[g].dataset, 0) << "prompt " << g << " came from inactive b";
  }
  EXPECT_GT(engine.admitted().size(), admitted_at_switch);
  EXPECT_GT(b_finished, 0);
  EXPECT_EQ(d->inflight(1), 0);
}

TEST(SimulationTest, AnInvalidMixIsRefusedAndChangesNothing) {
  auto options = Options("sample", 1000);
  auto d = *Dispatcher::Create(options);
  EXPECT_FALSE(d->SetDatasets({{"short", 0.0, 8}, {"long", 0.0, 0}}).ok()) << "nothing active";
  EXPECT_FALSE(d->SetDatasets({{"short", 1.0, 2}, {"long", 1.0, 0}}).ok()) << "cap < group";
  EXPECT_FALSE(d->SetDatasets({{"long", 1.0, 0}, {"short", 1.0, 8}}).ok()) << "reordered";
  EXPECT_FALSE(d->SetDatasets({{"short", 1.0, 8}}).ok()) << "one missing";
  ASSERT_EQ(d->options().datasets.size(), 2u);
  EXPECT_DOUBLE_EQ(d->options().datasets[0].weight, 3.0);
  EXPECT_EQ(d->options().datasets[0].max_inflight, 8);
}

TEST(SimulationTest, TrainingWaitsForAStragglerRatherThanLetItGoStale) {
  // Sample 1 of the first prompt is very long; everything else is quick.
  auto options = Options("sample", 1);
  options.datasets = {{"only", 1.0, 0}};
  FakeEngine engine([](uint64_t id) { return id <= 6 && id % 3 == 0 ? 200 : 2; });
  auto d = *Dispatcher::Create(options);
  int64_t steps_before_straggler = 0;
  for (int step = 0; step < 199; ++step) {
    d->Refill(engine);
    for (uint64_t id : engine.Step()) d->OnSampleFinished(id);
    while (auto batch = d->TakeBatch(engine.PolicyVersion())) {
      engine.BumpVersion();
      ++steps_before_straggler;
    }
  }
  // The straggler was dispatched at version 0: only one step (to version 1)
  // may happen while it is in flight.
  EXPECT_EQ(steps_before_straggler, 1);
  EXPECT_EQ(engine.PolicyVersion(), 1);
}

// Runs `engine` and `d` for `steps` engine steps; returns a trace of what
// was admitted and trained.
std::vector<uint64_t> Drive(FakeEngine& engine, Dispatcher& d, int steps) {
  std::vector<uint64_t> trace;
  for (int step = 0; step < steps; ++step) {
    d.Refill(engine);
    for (uint64_t id : engine.Step()) d.OnSampleFinished(id);
    while (auto batch = d.TakeBatch(engine.PolicyVersion())) {
      for (const auto& subgroup : *batch) trace.push_back(subgroup.subgroup_id);
      engine.BumpVersion();
    }
  }
  for (const auto& group : engine.admitted())
    trace.push_back(group.prompt_id * 1000 + group.dataset);
  return trace;
}

TEST(SimulationTest, ExportedStateContinuesExactly) {
  for (const char* policy : {"sample", "batch"}) {
    auto options = Options(policy, 2);
    options.warmup_drop_samples = 5;
    FakeEngine engine(HeavyTailLength);
    auto original = *Dispatcher::Create(options);
    Drive(engine, *original, 150);
    // Checkpoint mid-run (samples in flight, subgroups ready), then continue
    // both the original and a restored copy on identical engines.
    FakeEngine engine_copy = engine;
    auto restored = *Dispatcher::Create(options);
    const nlohmann::json state = original->ExportState();
    ASSERT_TRUE(restored->ImportState(nlohmann::json::parse(state.dump())).ok());
    EXPECT_EQ(restored->ExportState(), state);
    EXPECT_EQ(Drive(engine, *original, 400), Drive(engine_copy, *restored, 400)) << policy;
  }
}

TEST(SimulationTest, MalformedStateIsRejectedAndChangesNothing) {
  auto options = Options("sample", 2);
  FakeEngine engine(HeavyTailLength);
  auto d = *Dispatcher::Create(options);
  Drive(engine, *d, 20);
  const nlohmann::json before = d->ExportState();
  nlohmann::json broken = before;
  broken["samples"][0][1] = 999999;  // unknown prompt
  EXPECT_TRUE(absl::IsDataLoss(d->ImportState(broken)));
  EXPECT_TRUE(absl::IsDataLoss(d->ImportState(nlohmann::json{{"policy", "sample"}})));
  EXPECT_TRUE(absl::IsDataLoss(d->ImportState(nlohmann::json::array())));
  broken = before;
  broken["policy"] = "sync";
  EXPECT_TRUE(absl::IsDataLoss(d->ImportState(broken)));
  EXPECT_EQ(d->ExportState(), before);
}

TEST(SimulationTest, StateWithSampleSeedsStillImports) {
  // Older checkpoints wrote each sample of a prompt group as [sample_id, seed].
  auto options = Options("sample", 2);
  FakeEngine engine(HeavyTailLength);
  auto d = *Dispatcher::Create(options);
  Drive(engine, *d, 20);
  const nlohmann::json state = d->ExportState();
  nlohmann::json old = state;
  for (auto& prompt : old["prompts"]) {
    for (auto& subgroup : prompt["group"]["subgroups"]) {
      for (auto& sample : subgroup["samples"]) sample = {sample, 12345};
    }
  }
  ASSERT_NE(old, state);
  auto restored = *Dispatcher::Create(options);
  ASSERT_TRUE(restored->ImportState(old).ok());
  EXPECT_EQ(restored->ExportState(), state);
}

}  // namespace
}  // namespace loom::dispatch
