// Live changes to a run's config: the same keys as --set (list entries by
// index or name), the same errors as a config file, and only live keys.

#include <gtest/gtest.h>

#include "loom/config/live.h"
#include "testing/temp_dir.h"

namespace loom::config {
namespace {

using loom::testing::TempDir;

RunConfig TwoDatasets() {
  TempDir dir;
  const std::string path = dir.Write("live.yaml",
                                     "run: {name: live}\n"
                                     "model: {path: m}\n"
                                     "tasks:\n"
                                     "  datasets:\n"
                                     "    - {name: arith, teacher: t1}\n"
                                     "    - {name: sort, kind: sort, teacher: t2, weight: 2}\n"
                                     "opd:\n"
                                     "  teachers:\n"
                                     "    - {name: t1, path: /models/t1}\n"
                                     "    - {name: t2, path: /models/t2}\n"
                                     "train: {stages: [opd]}\n");
  auto config = LoadRunConfig(path, {});
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

std::string RefusalText(const absl::StatusOr<RunConfig>& config) {
  return config.ok() ? "(accepted)" : std::string(config.status().message());
}

TEST(LiveConfigKeysTest, ListEntriesByNameIndexOrBrackets) {
  const RunConfig current = TwoDatasets();
  for (const char* key :
       {"tasks.datasets.sort.weight", "tasks.datasets.1.weight", "tasks.datasets[1].weight"}) {
    std::vector<LiveChange> changes;
    auto next = ApplyLiveChange(current, {std::string(key) + "=0.5"}, changes);
    ASSERT_TRUE(next.ok()) << key << ": " << next.status();
    EXPECT_DOUBLE_EQ(next->tasks.datasets[1].weight, 0.5) << key;
    EXPECT_DOUBLE_EQ(next->tasks.datasets[0].weight, 1.0) << key;
    ASSERT_EQ(changes.size(), 1u) << key;
    EXPECT_EQ(changes[0].key, "tasks.datasets.sort.weight");
    EXPECT_EQ(changes[0].from, "2.0");
    EXPECT_EQ(changes[0].to, "0.5");
  }
}

// `loom train --set` takes the same list-entry keys.
TEST(LiveConfigKeysTest, TrainSetReachesListEntries) {
  TempDir dir;
  const std::string path = dir.Write("two.yaml",
                                     "run: {name: two}\nmodel: {path: m}\ntasks:\n  datasets:\n"
                                     "    - {name: arith}\n    - {name: sort, kind: sort}\n");
  for (const char* set : {"tasks.datasets[1].weight=0", "tasks.datasets.1.weight=0",
                          "tasks.datasets.sort.weight=0"}) {
    auto config = LoadRunConfig(path, {set});
    ASSERT_TRUE(config.ok()) << set << ": " << config.status();
    EXPECT_DOUBLE_EQ(config->tasks.datasets[1].weight, 0.0) << set;
    EXPECT_DOUBLE_EQ(config->tasks.datasets[0].weight, 1.0) << set;
  }
  auto missing = LoadRunConfig(path, {"tasks.datasets.reverse.weight=0"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "--set tasks.datasets.reverse.weight=0: tasks.datasets: no entry 'reverse': give an "
            "index 0..1 or a name (arith, sort)");
}

TEST(LiveConfigKeysTest, TeachersAreAddedReplacedAndRemoved) {
  const RunConfig current = TwoDatasets();
  std::vector<LiveChange> changes;
  auto next = ApplyLiveChange(
      current,
      {"+opd.teachers={name: t3, path: /models/t3}", "tasks.datasets.sort.teacher=t3",
       "~opd.teachers.t2", "opd.teachers.t1.path=/models/t1b", "tasks.datasets.arith.active=false"},
      changes);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_EQ(next->opd.teachers.size(), 2u);
  EXPECT_EQ(next->opd.teachers[0].path, "/models/t1b");
  EXPECT_EQ(next->opd.teachers[1].name, "t3");
  EXPECT_EQ(next->tasks.datasets[1].teacher, "t3");
  EXPECT_FALSE(next->tasks.datasets[0].active);
  std::vector<std::string> keys;
  for (const LiveChange& change : changes) keys.push_back(change.key);
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "opd.teachers", "opd.teachers.t1.path", "opd.teachers.t2.config",
                      "opd.teachers.t2.name", "opd.teachers.t2.path", "opd.teachers.t3.config",
                      "opd.teachers.t3.name", "opd.teachers.t3.path", "tasks.datasets.arith.active",
                      "tasks.datasets.sort.teacher"}));
  EXPECT_EQ(changes[0].from, "[t1, t2]");
  EXPECT_EQ(changes[0].to, "[t1, t3]");
  EXPECT_EQ(changes[4].to, "") << "a removed teacher's keys are gone";
  EXPECT_EQ(changes[7].from, "") << "an added teacher's keys are new";
}

TEST(LiveConfigKeysTest, RejectionsSayWhichKeyAndWhatWasExpected) {
  const RunConfig current = TwoDatasets();
  std::vector<LiveChange> changes;
  EXPECT_EQ(RefusalText(ApplyLiveChange(current, {"model.path=other"}, changes)),
            "model.path: not live-changeable (live keys: tasks.datasets.*.weight, "
            "tasks.datasets.*.active, tasks.datasets.*.max_inflight, tasks.datasets.*.teacher, "
            "tasks.eval_every, opd.teachers, opd.teachers.*.name, opd.teachers.*.path, "
            "opd.teachers.*.config, tasks.datasets.*.filter.min_pass, "
            "tasks.datasets.*.filter.max_pass, tasks.datasets.*.filter.after_attempts, "
            "tasks.datasets.*.filter.window); change "
            "it in the config and restart with --resume auto");
  EXPECT_EQ(RefusalText(ApplyLiveChange(current, {"tasks.datasets.sort.weight=-1"}, changes)),
            "tasks.datasets[1].weight: out of range: expected a value >= 0, got -1");
  EXPECT_EQ(RefusalText(ApplyLiveChange(current, {"tasks.datasets.sort.wieght=1"}, changes)),
            "tasks.datasets[1].wieght: unknown key (did you mean 'weight'?)");
  EXPECT_EQ(RefusalText(ApplyLiveChange(current, {"tasks.datasets.reverse.weight=1"}, changes)),
            "tasks.datasets: no entry 'reverse': give an index 0..1 or a name (arith, sort)");
  EXPECT_EQ(RefusalText(ApplyLiveChange(current, {"tasks.datasets.sort.weight=lots"}, changes)),
            "tasks.datasets[1].weight: expected a number, got 'lots'");
  EXPECT_EQ(RefusalText(ApplyLiveChange(current, {"tasks.datasets.sort.teacher=t9"}, changes)),
            "tasks.datasets[1].teacher: unknown teacher 't9' (opd.teachers: t1, t2)");
  EXPECT_EQ(RefusalText(ApplyLiveChange(current, {"~opd.teachers.t2"}, changes)),
            "tasks.datasets[1].teacher: unknown teacher 't2' (opd.teachers: t1)");
  EXPECT_EQ(
      RefusalText(ApplyLiveChange(current, {"+tasks.datasets={name: more, teacher: t1}"}, changes)),
      "tasks.datasets: entries cannot be added, removed or reordered while a run goes on (the "
      "run has [arith, sort], the change gives [arith, sort, more])");
  EXPECT_EQ(RefusalText(ApplyLiveChange(current, {"tasks.datasets.sort.weight=2"}, changes)),
            "nothing changes: every value given is already the live one");
  EXPECT_EQ(RefusalText(ApplyLiveChange(current, {"tasks.datasets.sort.weight"}, changes)),
            "tasks.datasets.sort.weight: expected key=value, +list=value (append) or ~key "
            "(remove), e.g. --set rollout.max_batch=32");
  // A live key beside a refused one: the whole change is refused.
  EXPECT_EQ(RefusalText(ApplyLiveChange(
                current, {"tasks.datasets.sort.weight=0.5", "rollout.temperature=0.5"}, changes)),
            "rollout.temperature: not live-changeable (live keys: tasks.datasets.*.weight, "
            "tasks.datasets.*.active, tasks.datasets.*.max_inflight, tasks.datasets.*.teacher, "
            "tasks.eval_every, opd.teachers, opd.teachers.*.name, opd.teachers.*.path, "
            "opd.teachers.*.config, tasks.datasets.*.filter.min_pass, "
            "tasks.datasets.*.filter.max_pass, tasks.datasets.*.filter.after_attempts, "
            "tasks.datasets.*.filter.window); change "
            "it in the config and restart with --resume auto");
  EXPECT_TRUE(changes.empty());
}

TEST(LiveConfigKeysTest, LiveAssignmentsRestoreTheLiveValuesOverTheFilesOnes) {
  const RunConfig file = TwoDatasets();
  std::vector<LiveChange> changes;
  auto live = ApplyLiveChange(
      file,
      {"tasks.datasets.arith.weight=0.25", "tasks.datasets.sort.max_inflight=8",
       "+opd.teachers={name: t3, path: '/models/t 3'}", "tasks.datasets.sort.teacher=t3",
       "tasks.eval_every=3", "tasks.datasets.arith.active=false",
       "tasks.datasets.sort.filter.after_attempts=8", "tasks.datasets.sort.filter.max_pass=0.9"},
      changes);
  ASSERT_TRUE(live.ok()) << live.status();
  auto restored = ReapplyLive(file, LiveAssignments(*live));
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(ResolvedYaml(*restored), ResolvedYaml(*live));
  EXPECT_NE(ResolvedYaml(file), ResolvedYaml(*live));
}

TEST(LiveConfigKeysTest, DifficultyFilterBandsAreLiveItsLedgerStartIsNot) {
  const RunConfig current = TwoDatasets();
  std::vector<LiveChange> changes;
  auto next = ApplyLiveChange(
      current,
      {"tasks.datasets.sort.filter.after_attempts=8", "tasks.datasets.sort.filter.min_pass=0.1",
       "tasks.datasets.sort.filter.max_pass=0.9", "tasks.datasets.sort.filter.window=16"},
      changes);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->tasks.datasets[1].filter.after_attempts, 8);
  EXPECT_DOUBLE_EQ(next->tasks.datasets[1].filter.max_pass, 0.9);
  EXPECT_EQ(next->tasks.datasets[1].filter.window, 16);
  EXPECT_EQ(changes.size(), 4u);
  EXPECT_EQ(RefusalText(ApplyLiveChange(current,
                                        {"tasks.datasets.sort.filter.min_pass=0.95",
                                         "tasks.datasets.sort.filter.max_pass=0.5"},
                                        changes)),
            "tasks.datasets[1].filter.min_pass: must be <= max_pass (0.500000)");
  EXPECT_NE(RefusalText(
                ApplyLiveChange(current, {"tasks.datasets.sort.filter.from_ledger=true"}, changes))
                .find("tasks.datasets.sort.filter.from_ledger: not live-changeable"),
            std::string::npos);
}

TEST(LiveConfigKeysTest, PatternsMatchWholeComponents) {
  EXPECT_TRUE(IsLiveKey("tasks.datasets.sort.weight"));
  EXPECT_TRUE(IsLiveKey("opd.teachers"));
  EXPECT_FALSE(IsLiveKey("tasks.datasets.sort.weight.x"));
  EXPECT_FALSE(IsLiveKey("tasks.datasets.sort.kind"));
  EXPECT_FALSE(IsLiveKey("tasks.datasets"));
  EXPECT_FALSE(IsLiveKey("tasks.datasets.weight"));
  EXPECT_FALSE(IsLiveKey("opd.estimator"));
}

}  // namespace
}  // namespace loom::config
