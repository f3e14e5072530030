// The tasks / effort / grpo / async config sections: defaults, and every
// malformed form reported with its key path and location.

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "loom/config/async_section.h"
#include "loom/config/binder.h"
#include "loom/config/grpo_section.h"
#include "loom/config/tasks_section.h"
#include "loom/config/tree.h"

namespace loom::config {
namespace {

struct Sections {
  TasksSection tasks;
  EffortSection effort;
  GrpoSection grpo;
  AsyncSection async;
  template <class V>
  void Visit(V& v) {
    v.Section("tasks", tasks, Doc(""));
    v.Section("effort", effort, Doc(""));
    v.Section("grpo", grpo, Doc(""));
    v.Section("async", async, Doc(""));
  }
};

std::string Errors(const std::string& yaml, Sections* out = nullptr) {
  std::vector<ConfigError> errors;
  ConfigTree tree = ConfigTree::FromString(yaml, "t.yaml", errors);
  Sections sections;
  for (auto& e : Bind(tree, sections)) errors.push_back(std::move(e));
  if (out) *out = sections;
  std::string text;
  for (const auto& e : errors) text += e.ToString() + "\n";
  return text;
}

TEST(SectionsTest, GoodConfigBinds) {
  Sections s;
  EXPECT_EQ(Errors("tasks:\n"
                   "  datasets:\n"
                   "    - {name: a, kind: sort, max_inflight: 16, weight: 2}\n"
                   "    - {name: b, kind: jsonl, path: b.jsonl}\n"
                   "effort: {levels: [25, 50, 100], samples_per_level: [2, 2, 4]}\n"
                   "grpo: {clip_high: 0.28, length_reward: {k0: 0.5}}\n"
                   "async: {dispatch: prompt, max_staleness: 0}\n",
                   &s),
            "");
  EXPECT_EQ(s.tasks.datasets.size(), 2u);
  EXPECT_EQ(s.tasks.datasets[0].max_inflight, 16);
  EXPECT_EQ(s.effort.GroupSize(), 8);
  EXPECT_EQ(s.effort.SamplesAt(2), 4);
  EXPECT_DOUBLE_EQ(s.grpo.length_reward.k0, 0.5);
  EXPECT_EQ(s.async.dispatch, "prompt");
}

TEST(SectionsTest, DefaultsNeedNoKeys) {
  Sections s;
  EXPECT_EQ(Errors("{}\n", &s), "");
  EXPECT_EQ(s.async.dispatch, "sample");
  EXPECT_EQ(s.effort.GroupSize(), 8);
}

// SFT draws its efforts from the levels, or with sft_every_effort half the
// time from all of 1..100 (so efforts between the levels come up too).
TEST(SectionsTest, SftEffortsComeFromTheLevelsOrFromEveryEffort) {
  Sections s;
  ASSERT_EQ(Errors("effort: {levels: [25, 50, 75, 100]}\n", &s), "");
  std::mt19937_64 rng(7);
  std::set<int> drawn;
  for (int i = 0; i < 2000; ++i) drawn.insert(s.effort.DrawSftEffort(rng));
  EXPECT_EQ(drawn, (std::set<int>{25, 50, 75, 100}));

  ASSERT_EQ(Errors("effort: {levels: [25, 50, 75, 100], sft_every_effort: true}\n", &s), "");
  drawn.clear();
  int at_levels = 0;
  for (int i = 0; i < 2000; ++i) {
    const int effort = s.effort.DrawSftEffort(rng);
    drawn.insert(effort);
    at_levels += effort % 25 == 0;
  }
  // Half from the levels, half from 1..100 (4 in 100 of those at a level):
  // 1040 expected, binomial sd 22.
  EXPECT_GT(at_levels, 900);
  EXPECT_LT(at_levels, 1180);
  EXPECT_EQ(drawn.size(), 100u);  // 1000 uniform draws miss one of 100 values with p < 1e-2
  EXPECT_EQ(*drawn.begin(), 1);
  EXPECT_EQ(*drawn.rbegin(), 100);
  EXPECT_NE(Errors("effort: {sft_every_effort: 3}\n").find("effort.sft_every_effort"),
            std::string::npos);
}

TEST(SectionsTest, DatasetErrorsNameTheEntry) {
  const std::string errors = Errors(
      "tasks:\n"
      "  datasets:\n"
      "    - {name: a, kind: chess}\n"
      "    - {name: a, min_difficulty: 4, max_difficulty: 2}\n"
      "    - {name: c, kind: jsonl}\n"
      "    - {kind: sort, eval_fraction: 0.9}\n");
  EXPECT_NE(errors.find("tasks.datasets[0].kind"), std::string::npos) << errors;
  EXPECT_NE(errors.find("tasks.datasets[1].min_difficulty: must be <= max_difficulty (2)"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[2].path: is required for kind jsonl"), std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[3].name"), std::string::npos) << errors;
  EXPECT_NE(errors.find("tasks.datasets[3].eval_fraction"), std::string::npos) << errors;
  EXPECT_NE(errors.find("t.yaml:"), std::string::npos) << errors;
}

TEST(SectionsTest, SandboxEnvironmentTakesOnlyAgenticKinds) {
  Sections sections;
  EXPECT_EQ(Errors("tasks:\n  datasets:\n"
                   "    - {name: a, kind: arithmetic, environment: sandbox}\n"
                   "    - {name: b, kind: fix_repo, environment: sandbox}\n"
                   "    - {name: c, kind: lookup, environment: sandbox}\n",
                   &sections),
            "");
  EXPECT_EQ(sections.tasks.datasets[1].environment, "sandbox");
  const std::string errors = Errors(
      "tasks:\n  datasets:\n"
      "    - {name: a, kind: sort, environment: sandbox}\n"
      "    - {name: b, kind: fix_repo}\n"
      "    - {name: c, environment: docker}\n"
      "    - {name: d, kind: lookup}\n");
  EXPECT_NE(
      errors.find("tasks.datasets[0].kind: environment sandbox runs agent tasks: agent_jsonl"),
      std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[1].kind: fix_repo is an agentic task"), std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[2].environment"), std::string::npos) << errors;
  EXPECT_NE(errors.find("tasks.datasets[3].kind: lookup is an agentic task"), std::string::npos)
      << errors;
}

// A dataset's harness: the built-in loop, a harness loom knows, or any
// other name with its command; only for sandbox episodes.
TEST(SectionsTest, HarnessIsBuiltInOrACommandAndOnlyForSandboxEpisodes) {
  Sections sections;
  EXPECT_EQ(Errors("tasks:\n  datasets:\n"
                   "    - {name: a, kind: fix_repo, environment: sandbox}\n"
                   "    - {name: b, kind: fix_repo, environment: sandbox, harness: pi}\n"
                   "    - {name: c, kind: fix_repo, environment: sandbox, harness: mine, "
                   "harness_command: ./agent, harness_env: {MODE: fast}}\n",
                   &sections),
            "");
  EXPECT_EQ(sections.tasks.datasets[0].harness, "builtin");
  EXPECT_EQ(sections.tasks.datasets[2].harness_command, "./agent");
  EXPECT_EQ(sections.tasks.datasets[2].harness_env.at("MODE"), "fast");
  const std::string errors = Errors(
      "tasks:\n  datasets:\n"
      "    - {name: a, kind: sort, harness: pi}\n"
      "    - {name: b, kind: fix_repo, environment: sandbox, harness: mine}\n"
      "    - {name: c, kind: fix_repo, environment: sandbox, harness: codex, "
      "harness_command: ./agent}\n"
      "    - {name: d, kind: fix_repo, environment: sandbox, harness: ''}\n"
      "    - {name: e, kind: fix_repo, environment: sandbox, harness_args: --x}\n"
      "    - {name: f, kind: fix_repo, environment: sandbox, harness: pi, "
      "harness_env: {OPENAI_API_KEY: k, 1X: y}}\n"
      "    - {name: g, kind: fix_repo, environment: sandbox, harness_env: {A: b}}\n");
  EXPECT_NE(errors.find("tasks.datasets[0].harness: runs agent episodes: only with environment "
                        "sandbox"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[1].harness_command: is required for harness 'mine'"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[2].harness_command: is only for a harness not built in"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[3].harness: must name a harness"), std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[4].harness_args: is only for the harnesses built in"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[5].harness_env: OPENAI_API_KEY is loom's"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[5].harness_env: '1X' is not a variable name"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[6].harness_env: is only for an external harness"),
            std::string::npos)
      << errors;
}

// Only fix_repo's demonstrations have a slip to make.
TEST(SectionsTest, DemonstrationSlipIsForFixRepoOnly) {
  EXPECT_EQ(Errors("tasks:\n  datasets:\n"
                   "    - {name: a, kind: fix_repo, environment: sandbox, "
                   "demonstration_slip_fraction: 0.75}\n"),
            "");
  const std::string errors = Errors(
      "tasks:\n  datasets:\n"
      "    - {name: a, kind: lookup, environment: sandbox, "
      "demonstration_slip_fraction: 0.5}\n"
      "    - {name: b, kind: arithmetic, demonstration_slip_fraction: 0.5}\n"
      "    - {name: c, kind: fix_repo, environment: sandbox, "
      "demonstration_slip_fraction: 1.5}\n");
  EXPECT_NE(errors.find("tasks.datasets[0].demonstration_slip_fraction: is only for the agentic "
                        "fix_repo task"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[1].demonstration_slip_fraction"), std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tasks.datasets[2].demonstration_slip_fraction"), std::string::npos)
      << errors;
}

TEST(SectionsTest, DuplicateDatasetNames) {
  const std::string errors =
      Errors("tasks:\n  datasets:\n    - {name: a}\n    - {name: a, kind: sort}\n");
  EXPECT_NE(errors.find("tasks.datasets[1].name: duplicate dataset name 'a'"), std::string::npos)
      << errors;
}

TEST(SectionsTest, EffortErrors) {
  EXPECT_NE(Errors("effort: {levels: []}\n").find("effort.levels: needs at least one effort"),
            std::string::npos);
  EXPECT_NE(Errors("effort: {levels: [0, 50]}\n").find("effort 0 is outside 1..100"),
            std::string::npos);
  EXPECT_NE(Errors("effort: {levels: [50, 50]}\n").find("duplicate effort 50"), std::string::npos);
  EXPECT_NE(Errors("effort: {levels: [25, 50, 75], samples_per_level: [1, 2]}\n")
                .find("effort.samples_per_level: needs 1 or 3 entries"),
            std::string::npos);
  EXPECT_NE(Errors("effort: {samples_per_level: [0]}\n").find("every entry must be >= 1"),
            std::string::npos);
}

TEST(SectionsTest, GrpoAndAsyncRanges) {
  EXPECT_NE(Errors("grpo: {clip_low: 1.5}\n").find("grpo.clip_low"), std::string::npos);
  EXPECT_NE(Errors("grpo: {length_reward: {l_norm: 0}}\n").find("grpo.length_reward.l_norm"),
            std::string::npos);
  EXPECT_NE(Errors("async: {dispatch: eager}\n").find("async.dispatch"), std::string::npos);
  EXPECT_NE(Errors("async: {mask_lag: -2}\n").find("async.mask_lag"), std::string::npos);
  EXPECT_NE(Errors("async: {max_inflight: 0}\n").find("async.max_inflight"), std::string::npos);
  EXPECT_NE(Errors("async: {max_inflght: 8}\n").find("async.max_inflght"), std::string::npos);
}

}  // namespace
}  // namespace loom::config
