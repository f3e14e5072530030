// Online difficulty filtering in the dispatcher: tasks whose pass rate leaves
// their dataset's band retire and are never drawn again; the state carries
// across an export and import exactly; live bands; exhaustion; and the
// errors of an impossible filter or a malformed state.

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "dispatch/fake_engine.h"
#include "loom/dispatch/dispatcher.h"

namespace loom::dispatch::filter_test {  // named: the unity build joins the suite's files
namespace {

constexpr uint64_t kProblems = 12;

// Problem p of a dataset: 0-3 always solved, 4-7 never, 8-11 by every other
// sample.
bool Passes(uint64_t problem, uint64_t sample_id) {
  if (problem < 4) return true;
  if (problem < 8) return false;
  return sample_id % 2 == 0;
}

std::string Key(int dataset, uint64_t index) {
  return std::to_string(dataset) + ":" + std::to_string(index % kProblems);
}

DispatchOptions Options(FilterBand band) {
  DispatchOptions o;
  o.max_inflight = 8;
  o.batch_samples = 4;
  o.max_staleness = 100;
  o.efforts = {{50, 4}};
  o.datasets = {{"mixed", 1.0, 0, band, kProblems}};
  o.seed = 3;
  o.problem_key = Key;
  return o;
}

constexpr FilterBand kBand{0.05, 0.95, 4};

// Drives a dispatcher against an engine whose samples all finish on the next
// step, trains every ready batch and records its verdicts.
class Driver {
 public:
  explicit Driver(std::unique_ptr<Dispatcher> dispatcher) : d(std::move(dispatcher)) {}

  void Step() {
    d->Refill(engine);
    for (uint64_t id : engine.Step()) d->OnSampleFinished(id);
    auto batch = d->TakeBatch(version);
    if (!batch) return;
    std::vector<TaskVerdict> verdicts;
    for (const ReadySubgroup& s : *batch) {
      const std::string key = Key(s.dataset, s.problem_index);
      for (uint64_t id : s.sample_ids) {
        verdicts.push_back({s.dataset, key, "p" + key, Passes(s.problem_index % kProblems, id)});
      }
    }
    d->RecordVerdicts(verdicts);
    for (const Retirement& r : d->TakeRetirements()) retired.insert(r.key);
    ++version;
  }

  // The problems admitted, in order (as keys).
  std::vector<std::string> Admitted() const {
    std::vector<std::string> keys;
    for (const PromptGroup& g : engine.admitted()) keys.push_back(Key(g.dataset, g.problem_index));
    return keys;
  }

  std::unique_ptr<Dispatcher> d;
  FakeEngine engine{[](uint64_t) { return 1; }};
  int64_t version = 0;
  std::set<std::string> retired;
};

std::unique_ptr<Dispatcher> Make(const DispatchOptions& options) {
  auto created = Dispatcher::Create(options);
  EXPECT_TRUE(created.ok()) << created.status();
  return *std::move(created);
}

TEST(DifficultyFilterTest, TrivialAndUnsolvableTasksRetireAndAreNeverDrawnAgain) {
  Driver run(Make(Options(kBand)));
  std::map<std::string, size_t> retired_at;  // key -> admissions before it retired
  for (int i = 0; i < 60; ++i) {
    run.Step();
    for (const std::string& key : run.retired) retired_at.emplace(key, run.Admitted().size());
  }
  std::set<std::string> expected;
  for (uint64_t p = 0; p < 8; ++p) expected.insert(Key(0, p));
  EXPECT_EQ(run.retired, expected);
  EXPECT_EQ(run.d->retired(0), 8);
  const std::vector<std::string> admitted = run.Admitted();
  for (const auto& [key, before] : retired_at) {
    for (size_t i = before; i < admitted.size(); ++i) {
      // One group may already have been admitted when its verdicts came in.
      if (i > before + 1) {
        EXPECT_NE(admitted[i], key) << "admission " << i;
      }
    }
  }
  // Once the first epochs are over only the informative tasks come up.
  for (size_t i = admitted.size() - 10; i < admitted.size(); ++i) {
    EXPECT_EQ(expected.count(admitted[i]), 0u) << admitted[i];
  }
  EXPECT_TRUE(run.d->ExhaustedDatasets().empty());
}

TEST(DifficultyFilterTest, AnOffFilterRetiresNothing) {
  Driver run(Make(Options(FilterBand{})));
  for (int i = 0; i < 40; ++i) run.Step();
  EXPECT_TRUE(run.retired.empty());
  EXPECT_EQ(run.d->retired(0), 0);
}

TEST(DifficultyFilterTest, ExportedStateContinuesExactly) {
  Driver whole(Make(Options(kBand)));
  for (int i = 0; i < 50; ++i) whole.Step();

  Driver first(Make(Options(kBand)));
  for (int i = 0; i < 7; ++i) first.Step();
  const nlohmann::json state = first.d->ExportState();
  ASSERT_GT(first.d->retired(0), 0);
  Driver second(Make(Options(kBand)));
  ASSERT_TRUE(second.d->ImportState(state).ok());
  second.version = first.version;
  second.retired = first.retired;
  for (int i = 7; i < 50; ++i) second.Step();

  std::vector<std::string> resumed = first.Admitted();
  const std::vector<std::string> after = second.Admitted();
  resumed.insert(resumed.end(), after.begin(), after.end());
  EXPECT_EQ(resumed, whole.Admitted());
  EXPECT_EQ(second.retired, whole.retired);
  EXPECT_EQ(second.d->ExportState(), whole.d->ExportState());
}

TEST(DifficultyFilterTest, ANarrowerLiveBandRetiresAtOnceAndRetiredStaysRetired) {
  Driver run(Make(Options(FilterBand{0, 1, 4})));
  for (int i = 0; i < 30; ++i) run.Step();
  EXPECT_TRUE(run.retired.empty());  // [0, 1] holds every rate

  std::vector<DatasetQuota> narrow = Options(kBand).datasets;
  narrow[0].filter = {0.05, 0.4, 4};  // excludes 0.5 and 1, and 0
  ASSERT_TRUE(run.d->SetDatasets(narrow).ok());
  EXPECT_EQ(run.d->retired(0), static_cast<int64_t>(kProblems));
  EXPECT_EQ(run.d->TakeRetirements().size(), kProblems);

  std::vector<DatasetQuota> wide = narrow;
  wide[0].filter = {0, 1, 4};
  ASSERT_TRUE(run.d->SetDatasets(wide).ok());
  EXPECT_EQ(run.d->retired(0), static_cast<int64_t>(kProblems));
}

TEST(DifficultyFilterTest, ADatasetWhoseEveryTaskRetiredIsExhaustedAndTheOthersGoOn) {
  DispatchOptions options = Options(FilterBand{0.05, 0.95, 4});
  options.datasets[0].weight = 100;  // drawn first, so found exhausted
  options.datasets.push_back({"open", 1.0, 0, FilterBand{}, 0});
  auto d = Make(options);
  for (uint64_t p = 0; p < kProblems; ++p) d->SeedFilter(0, Key(0, p), "t", 10, 10);
  d->RetireOutsideBands();
  EXPECT_EQ(d->retired(0), static_cast<int64_t>(kProblems));
  FakeEngine engine([](uint64_t) { return 1000; });
  d->Refill(engine);
  ASSERT_FALSE(engine.admitted().empty());
  for (const PromptGroup& g : engine.admitted()) EXPECT_EQ(g.dataset, 1);
  EXPECT_EQ(d->ExhaustedDatasets(), std::vector<std::string>{"mixed"});
  EXPECT_GE(d->TakeStats().problems_skipped, static_cast<int64_t>(2 * kProblems));

  // Alone, the exhausted dataset admits nothing.
  auto alone = Make(Options(FilterBand{0.05, 0.95, 4}));
  for (uint64_t p = 0; p < kProblems; ++p) alone->SeedFilter(0, Key(0, p), "t", 4, 0);
  alone->RetireOutsideBands();
  FakeEngine idle([](uint64_t) { return 1; });
  EXPECT_EQ(alone->Refill(idle), 0);
  EXPECT_EQ(alone->ExhaustedDatasets(), std::vector<std::string>{"mixed"});
}

TEST(DifficultyFilterTest, HistoryBelowAfterAttemptsDoesNotRetireUntilTheRunAdds) {
  auto d = Make(Options(kBand));
  d->SeedFilter(0, Key(0, 0), "t", 3, 3);
  d->RetireOutsideBands();
  EXPECT_EQ(d->retired(0), 0);
  d->RecordVerdicts({{0, Key(0, 0), "t", true}});
  EXPECT_EQ(d->retired(0), 1);
  const std::vector<Retirement> retired = d->TakeRetirements();
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_EQ(retired[0].attempts, 4);
  EXPECT_EQ(retired[0].passes, 4);
  EXPECT_FALSE(retired[0].from_history);
}

// The step at which a task with verdicts `history` (oldest first, one a
// step) retires under `band`, computed over the whole list: the second path
// the filter's bit window is checked against. -1: never.
int RetiresAt(const std::vector<bool>& history, const FilterBand& band) {
  for (size_t n = 1; n <= history.size(); ++n) {
    if (static_cast<int>(n) < band.after_attempts) continue;
    const size_t judged =
        band.window > 0 && n >= static_cast<size_t>(std::min(band.window, band.after_attempts))
            ? std::min<size_t>(band.window, n)
            : n;
    int passes = 0;
    for (size_t i = n - judged; i < n; ++i) passes += history[i];
    const double rate = static_cast<double>(passes) / static_cast<double>(judged);
    if (rate < band.min_pass || rate > band.max_pass) return static_cast<int>(n);
  }
  return -1;
}

TEST(DifficultyFilterTest, AWindowJudgesTheMostRecentAttemptsAsAListOfThemWould) {
  std::mt19937 rng(11);
  int retired_by_window_only = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int window = 1 + static_cast<int>(rng() % 70) % FilterBand::kMaxWindow;
    const FilterBand band{0.1, 0.9, 1 + static_cast<int>(rng() % 10), trial % 5 == 0 ? 0 : window};
    // A policy that learns the task: its pass probability climbs from 0.2 to 1.
    std::vector<bool> history;
    for (int i = 0; i < 150; ++i) {
      history.push_back(std::uniform_real_distribution<double>(0, 1)(rng) < 0.2 + i / 120.0);
    }
    DifficultyFilter filter(1);
    int retired_at = -1;
    for (size_t n = 0; n < history.size() && retired_at < 0; ++n) {
      filter.Record({{0, "k", "task", history[n]}}, {band});
      if (filter.Retired(0, "k")) retired_at = static_cast<int>(n) + 1;
    }
    ASSERT_EQ(retired_at, RetiresAt(history, band))
        << "trial " << trial << " window " << band.window;
    FilterBand whole = band;
    whole.window = 0;
    retired_by_window_only += retired_at > 0 && RetiresAt(history, whole) < 0;
  }
  EXPECT_GT(retired_by_window_only, 50);  // the window retires what the run's rate keeps
}

TEST(DifficultyFilterTest, AWindowedTallyContinuesExactlyAfterExportAndImport) {
  const FilterBand band{0.1, 0.9, 4, 8};
  const std::vector<bool> history = {false, true, false, true, true, false, true,
                                     true,  true, true,  true, true, true,  true};
  DifficultyFilter first(1);
  for (size_t n = 0; n < 6; ++n) first.Record({{0, "k", "task", history[n]}}, {band});
  DifficultyFilter second(1);
  ASSERT_TRUE(second.Import(first.Export()).ok());
  int retired_at = -1;
  for (size_t n = 6; n < history.size() && retired_at < 0; ++n) {
    second.Record({{0, "k", "task", history[n]}}, {band});
    if (second.Retired(0, "k")) retired_at = static_cast<int>(n) + 1;
  }
  EXPECT_EQ(retired_at, RetiresAt(history, band));
  EXPECT_EQ(retired_at, 14);  // the last 8 attempts all passed
  const std::vector<Retirement> retired = second.TakeRetirements();
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_EQ(retired[0].pass_rate, 1.0);
  EXPECT_EQ(retired[0].attempts, 14);
  EXPECT_EQ(retired[0].passes, 11);
}

TEST(DifficultyFilterTest, AWindowJudgesLedgerHistoryUntilTheRunHasAttemptsOfItsOwn) {
  const FilterBand band{0.1, 0.9, 4, 4};
  DifficultyFilter filter(1);
  filter.Seed(0, "solved", "s", 20, 20);
  filter.Seed(0, "mixed", "m", 20, 10);
  filter.Reconsider({band});
  EXPECT_TRUE(filter.Retired(0, "solved"));
  // Three passes of the run's own are fewer than the window: the history's
  // half still judges, and the task stays.
  for (int i = 0; i < 3; ++i) filter.Record({{0, "mixed", "m", true}}, {band});
  EXPECT_FALSE(filter.Retired(0, "mixed"));
  filter.Record({{0, "mixed", "m", true}}, {band});
  EXPECT_TRUE(filter.Retired(0, "mixed"));
}

TEST(DifficultyFilterTest, AStateWrittenBeforeTheWindowStillImports) {
  DifficultyFilter filter(1);
  const nlohmann::json old = nlohmann::json::parse(
      R"({"datasets": [[["k", "n", 6, 3, false, false]]], "pending": [[0, "j", "m", 4, 4, false]]})");
  ASSERT_TRUE(filter.Import(old).ok());
  const std::vector<Retirement> pending = filter.TakeRetirements();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].pass_rate, 1.0);
  // With no recent verdicts the whole tally judges, until the run adds its own.
  filter.Reconsider({FilterBand{0.6, 1, 4, 4}});
  EXPECT_TRUE(filter.Retired(0, "k"));
  nlohmann::json bad = old;
  bad["datasets"][0][0] = {"k", "n", 6, 3, false, false, 0, 65};
  EXPECT_EQ(DifficultyFilter(1).Import(bad).code(), absl::StatusCode::kDataLoss);
}

TEST(DifficultyFilterTest, ImpossibleFiltersAreClearErrors) {
  DispatchOptions no_keys = Options(kBand);
  no_keys.problem_key = nullptr;
  auto created = Dispatcher::Create(no_keys);
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().message().find("'mixed' has a difficulty filter"), std::string::npos);

  DispatchOptions inverted = Options(FilterBand{0.8, 0.2, 4});
  created = Dispatcher::Create(inverted);
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().message().find("min_pass"), std::string::npos);
}

TEST(DifficultyFilterTest, MalformedFilterStateIsRejectedAndChangesNothing) {
  Driver run(Make(Options(kBand)));
  for (int i = 0; i < 10; ++i) run.Step();
  const nlohmann::json before = run.d->ExportState();
  for (const char* broken :
       {R"({"datasets": [[["k", "n", 1, 1, true]]], "pending": []})",  // a field short
        R"({"datasets": [], "pending": []})",                          // no dataset
        R"({"datasets": [[]], "pending": [[7, "k", "n", 1, 1, false]]})"}) {
    nlohmann::json state = before;
    state["filter"] = nlohmann::json::parse(broken);
    const absl::Status s = run.d->ImportState(state);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << broken;
    EXPECT_EQ(run.d->ExportState(), before);
  }
}

TEST(DifficultyFilterTest, RanksRecordingTheSameVerdictsKeepDisjointStreams) {
  std::vector<std::unique_ptr<Driver>> ranks;
  for (int r = 0; r < 2; ++r) {
    DispatchOptions o = Options(kBand);
    o.rank = r;
    o.ranks = 2;
    ranks.push_back(std::make_unique<Driver>(Make(o)));
  }
  std::set<uint64_t> prompt_ids;
  for (int i = 0; i < 30; ++i) {
    std::vector<TaskVerdict> all;
    for (auto& rank : ranks) {
      rank->d->Refill(rank->engine);
      for (uint64_t id : rank->engine.Step()) rank->d->OnSampleFinished(id);
      for (const ReadySubgroup& s : rank->d->TakeBatch(0).value_or(std::vector<ReadySubgroup>{})) {
        for (uint64_t id : s.sample_ids) {
          all.push_back({0, Key(0, s.problem_index), "t", Passes(s.problem_index % kProblems, id)});
        }
      }
    }
    for (auto& rank : ranks) rank->d->RecordVerdicts(all);
  }
  for (auto& rank : ranks) {
    for (const PromptGroup& g : rank->engine.admitted()) {
      EXPECT_TRUE(prompt_ids.insert(g.prompt_id).second) << "prompt " << g.prompt_id << " twice";
    }
    EXPECT_EQ(rank->d->retired(0), 8);
  }
  EXPECT_EQ(ranks[0]->d->ExportState()["filter"], ranks[1]->d->ExportState()["filter"]);
}

}  // namespace
}  // namespace loom::dispatch::filter_test
