// Loading real config files: bases, cycles, env interpolation, syntax errors,
// and the shipped configs.

#include <gtest/gtest.h>

#include <cstdlib>

#include "loom/config/run_config.h"
#include "testing/temp_dir.h"

namespace loom::config {
namespace {

using loom::testing::TempDir;

std::string ErrorText(const absl::StatusOr<RunConfig>& config) {
  return config.ok() ? "" : std::string(config.status().message());
}

TEST(RunConfigTest, QuickstartLoadsWithDefaults) {
  auto config = LoadRunConfig(std::string(LOOM_SOURCE_DIR) + "/configs/quickstart.yaml", {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->run.name, "quickstart");
  EXPECT_EQ(config->model.dtype, "float32");  // a default, not in the file
}

// Tests run from the source tree: a test config must never read a user's
// trained model from runs/ or write there.
TEST(RunConfigTest, TestConfigsStayOutOfRuns) {
  for (const char* name : {"e2e", "preempt", "agent"}) {
    auto config =
        LoadRunConfig(std::string(LOOM_SOURCE_DIR) + "/configs/test/" + name + ".yaml", {});
    ASSERT_TRUE(config.ok()) << name << ": " << config.status();
    EXPECT_EQ(config->model.path.rfind("/proc/", 0), 0u) << name << ": " << config->model.path;
  }
}

TEST(RunConfigTest, EffortLevelsTakeTierNames) {
  auto config = LoadRunConfig(std::string(LOOM_SOURCE_DIR) + "/configs/quickstart.yaml",
                              {"effort.levels=[max, high, low, 25]", "effort.in_prompt=true"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->effort.levels, (std::vector<int>{100, 75, 50, 25}));
  EXPECT_EQ(ErrorText(LoadRunConfig(std::string(LOOM_SOURCE_DIR) + "/configs/quickstart.yaml",
                                    {"effort.levels=[max, medium]"})),
            "--set effort.levels=[max, medium]: effort.levels[1]: expected integers (or max, high, "
            "low), got 'medium'");
}

TEST(RunConfigTest, BaseIsInheritedAndOverridden) {
  TempDir dir;
  dir.Write("configs/base.yaml", "run: {name: base, seed: 7, threads: 1}\nmodel: {path: m}\n");
  const std::string child =
      dir.Write("configs/child.yaml", "base: base.yaml\nrun:\n  threads: 2\n");
  auto config = LoadRunConfig(child, {"run.seed=9"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->run.name, "base");
  EXPECT_EQ(config->run.threads, 2);
  EXPECT_EQ(config->run.seed, 9);
  EXPECT_EQ(config->model.path, "m");
}

TEST(RunConfigTest, ErrorsInBaseFilesNameThatFile) {
  TempDir dir;
  const std::string base =
      dir.Write("base.yaml", "run:\n  name: x\n  seed: many\nmodel: {path: m}\n");
  const std::string child = dir.Write("child.yaml", "base: base.yaml\nrun: {threads: 1}\n");
  EXPECT_EQ(ErrorText(LoadRunConfig(child, {})),
            base + ":3:3: run.seed: expected an integer, got 'many'");
}

TEST(RunConfigTest, MissingBaseAndCycles) {
  TempDir dir;
  const std::string missing = dir.Write("a.yaml", "base: nothere.yaml\n");
  EXPECT_EQ(ErrorText(LoadRunConfig(missing, {})),
            missing + ":1:7: base: base file '" + dir.path() + "/nothere.yaml' does not exist");
  dir.Write("x.yaml", "base: y.yaml\nrun: {name: x}\n");
  dir.Write("y.yaml", "base: x.yaml\nmodel: {path: m}\n");
  std::string text = ErrorText(LoadRunConfig(dir / "x.yaml", {}));
  EXPECT_NE(text.find("base files form a cycle"), std::string::npos) << text;
  EXPECT_NE(text.find("x.yaml -> "), std::string::npos) << text;
}

TEST(RunConfigTest, SyntaxErrorHasLineAndColumn) {
  TempDir dir;
  const std::string path = dir.Write("bad.yaml", "run:\n  name: [unclosed\nmodel: {path: m}\n");
  std::string text = ErrorText(LoadRunConfig(path, {}));
  EXPECT_EQ(text.rfind(path + ":", 0), 0u) << text;
  EXPECT_NE(text.find("YAML syntax error"), std::string::npos) << text;
}

TEST(RunConfigTest, TopLevelMustBeAMap) {
  TempDir dir;
  const std::string path = dir.Write("list.yaml", "- a\n- b\n");
  EXPECT_EQ(ErrorText(LoadRunConfig(path, {})),
            path + ":1:1: expected a map of keys at the top level");
  EXPECT_EQ(ErrorText(LoadRunConfig(dir / "absent.yaml", {})),
            dir / "absent.yaml" + ": cannot open config file");
}

TEST(RunConfigTest, EnvironmentInterpolation) {
  TempDir dir;
  ::setenv("LOOM_TEST_RUN_NAME", "from-env", 1);
  ::unsetenv("LOOM_TEST_UNSET");
  const std::string ok = dir.Write(
      "ok.yaml",
      "run: {name: '${env:LOOM_TEST_RUN_NAME}-1'}\nmodel: {path: '${env:LOOM_TEST_UNSET:-/m}'}\n");
  auto config = LoadRunConfig(ok, {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->run.name, "from-env-1");
  EXPECT_EQ(config->model.path, "/m");
  const std::string bad =
      dir.Write("bad.yaml", "run: {name: x}\nmodel:\n  path: ${env:LOOM_TEST_UNSET}\n");
  EXPECT_EQ(ErrorText(LoadRunConfig(bad, {})),
            bad +
                ":3:9: model.path: environment variable LOOM_TEST_UNSET is not set "
                "(use ${env:LOOM_TEST_UNSET:-default} for a default)");
}

TEST(RunConfigTest, AllErrorsAtOnce) {
  TempDir dir;
  const std::string path = dir.Write("many.yaml",
                                     "run:\n  threads: -2\n  log_lvl: info\n"
                                     "model:\n  dtype: fp8\n  autocast: float16\n");
  auto config = LoadRunConfig(path, {"model.devise=cpu"});
  std::string text = ErrorText(config);
  EXPECT_EQ(text,
            path + ":1:1: run.name: required key is missing\n" +  //
                path +
                ":2:3: run.threads: out of range: expected a value between 0 and 1024, got -2\n" +
                path + ":3:3: run.log_lvl: unknown key (did you mean 'log_level'?)\n" + path +
                ":4:1: model.path: required key is missing\n" + path +
                ":5:3: model.dtype: expected one of 'float32' 'bfloat16', got 'fp8'\n" + path +
                ":6:3: model.autocast: expected one of 'none' 'bfloat16', got 'float16'\n" +
                "--set model.devise=cpu: model.devise: unknown key (did you mean 'device'?)");
}

// A difficulty filter's band must be a band, and starting it from the task
// ledger needs a ledger; each error names the key and its line.
TEST(RunConfigTest, DifficultyFilterErrorsNameTheKey) {
  TempDir dir;
  const std::string path =
      dir.Write("filter.yaml",
                "run: {name: f}\nmodel: {path: m}\ntasks:\n  ledger: \"off\"\n  datasets:\n"
                "    - name: a\n"
                "      filter: {min_pass: 0.9, max_pass: 0.2, after_attempts: 8}\n"
                "    - name: b\n"
                "      filter: {after_attempts: -1, window: 65}\n");
  const std::string text = ErrorText(LoadRunConfig(path, {}));
  EXPECT_NE(text.find("tasks.datasets[0].filter.min_pass: must be <= max_pass (0.200000)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tasks.datasets[1].filter.after_attempts: out of range"), std::string::npos)
      << text;
  EXPECT_NE(text.find("tasks.datasets[1].filter.window: out of range"), std::string::npos) << text;
  // Checked once the keys bind: a run with no ledger has no history to read.
  const std::string ledgerless =
      dir.Write("ledgerless.yaml",
                "run: {name: f}\nmodel: {path: m}\ntasks:\n  ledger: \"off\"\n  datasets:\n"
                "    - {name: b, filter: {after_attempts: 8, from_ledger: true}}\n");
  EXPECT_EQ(ErrorText(LoadRunConfig(ledgerless, {})),
            ledgerless +
                ":6:45: tasks.datasets[0].filter.from_ledger: reads the task ledger, but "
                "tasks.ledger is off");
}

TEST(RunConfigTest, ResolvedYamlLoadsBackToTheSameConfig) {
  TempDir dir;
  auto config = LoadRunConfig(std::string(LOOM_SOURCE_DIR) + "/configs/quickstart.yaml",
                              {"model.init={hidden_size: 64, num_hidden_layers: 2}"});
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string resolved = ResolvedYaml(*config);
  auto again = LoadRunConfig(dir.Write("resolved.yaml", resolved), {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ResolvedYaml(*again), resolved);
  EXPECT_EQ(again->model.init.at("hidden_size"), "64");
}

// A config with two datasets and an opd section. `second_dataset` is the
// second dataset's entry after its name (line 8 when one line), `teachers`
// the opd.teachers list (from line 11), `opd_fields` more opd keys.
std::string OpdYaml(const std::string& stages, const std::string& second_dataset,
                    const std::string& teachers, const std::string& opd_fields = "") {
  return "run: {name: opd}\n"
         "model: {path: m}\n"
         "tasks:\n"
         "  datasets:\n"
         "    - name: add\n"
         "      teacher: t1\n"
         "    - name: sub\n" +
         second_dataset +
         "opd:\n"
         "  teachers:\n" +
         teachers + opd_fields + "train: {stages: " + stages + "}\n";
}

const char* const kTwoTeachers =
    "    - {name: t1, path: /models/t1}\n"
    "    - {name: t2, path: /models/t2}\n";

TEST(OpdConfigTest, ValidConfigBinds) {
  TempDir dir;
  const std::string path =
      dir.Write("opd.yaml", OpdYaml("[sft, opd]", "      teacher: t2\n", kTwoTeachers,
                                    "  reward_weight: 0.25\n  teacher_memory_bytes: 1000000\n"));
  auto config = LoadRunConfig(path, {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->HasStage("opd"));
  ASSERT_EQ(config->opd.teachers.size(), 2u);
  EXPECT_EQ(config->opd.teachers[1].name, "t2");
  EXPECT_EQ(config->opd.teachers[1].path, "/models/t2");
  EXPECT_EQ(config->opd.teachers[1].config, "");
  EXPECT_EQ(config->opd.estimator, "full");  // the default
  EXPECT_TRUE(config->opd.FullKl());
  EXPECT_DOUBLE_EQ(config->opd.reward_weight, 0.25);
  EXPECT_EQ(config->opd.teacher_memory_bytes, 1000000);
  EXPECT_TRUE(config->opd.eval_teachers);  // the default
  EXPECT_EQ(config->tasks.datasets[0].teacher, "t1");
  EXPECT_EQ(config->tasks.datasets[1].teacher, "t2");
}

TEST(OpdConfigTest, SampledEstimatorAndUnknownEstimator) {
  TempDir dir;
  const std::string path =
      dir.Write("opd.yaml", OpdYaml("[opd]", "      teacher: t2\n", kTwoTeachers));
  auto sampled = LoadRunConfig(path, {"opd.estimator=sampled"});
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  EXPECT_FALSE(sampled->opd.FullKl());
  const std::string text = ErrorText(LoadRunConfig(path, {"opd.estimator=topk"}));
  EXPECT_NE(text.find("opd.estimator: expected one of 'full' 'sampled', got 'topk'"),
            std::string::npos)
      << text;
}

// A dataset naming a teacher that opd.teachers lacks: the error points at the
// dataset's `teacher` key, also when no stage is opd.
TEST(OpdConfigTest, UnknownTeacherNamesTheDatasetKey) {
  TempDir dir;
  for (const std::string stages : {"[opd]", "[sft, grpo]"}) {
    const std::string path =
        dir.Write("opd.yaml", OpdYaml(stages, "      teacher: t3\n", kTwoTeachers));
    EXPECT_EQ(ErrorText(LoadRunConfig(path, {})),
              path + ":8:7: tasks.datasets[1].teacher: unknown teacher 't3' (opd.teachers: t1, t2)")
        << stages;
  }
}

TEST(OpdConfigTest, OpdStageNeedsATeacherForEveryDataset) {
  TempDir dir;
  const std::string path =
      dir.Write("opd.yaml", OpdYaml("[sft, opd]", "      kind: arithmetic\n", kTwoTeachers));
  EXPECT_EQ(ErrorText(LoadRunConfig(path, {})),
            path +
                ":7:7: tasks.datasets[1].teacher: dataset 'sub' needs a teacher: the opd stage "
                "distils every dataset");
  // Without an opd stage a dataset needs no teacher.
  EXPECT_TRUE(LoadRunConfig(path, {"train.stages=[sft, grpo]"}).ok());
}

// An external harness's episodes train as several sequences, which only
// the GRPO step splits.
TEST(OpdConfigTest, HarnessDatasetsTrainInTheGrpoStageOnly) {
  TempDir dir;
  const std::string path = dir.Write(
      "opd.yaml", OpdYaml("[opd]",
                          "      teacher: t2\n      kind: fix_repo\n      environment: sandbox\n"
                          "      harness: pi\n",
                          kTwoTeachers));
  EXPECT_NE(ErrorText(LoadRunConfig(path, {}))
                .find("tasks.datasets[1].harness: an external harness's episodes train in the "
                      "grpo stage only, not opd"),
            std::string::npos);
  EXPECT_TRUE(LoadRunConfig(path, {"train.stages=[grpo]"}).ok());
}

TEST(OpdConfigTest, OpdStageNeedsTeachers) {
  TempDir dir;
  const std::string path = dir.Write("opd.yaml",
                                     "run: {name: opd}\nmodel: {path: m}\n"
                                     "tasks:\n  datasets:\n    - {name: add}\n"
                                     "train: {stages: [opd]}\n");
  const std::string text = ErrorText(LoadRunConfig(path, {}));
  EXPECT_NE(text.find("opd.teachers: train.stages has opd but no teacher is configured"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tasks.datasets[0].teacher: dataset 'add' needs a teacher"),
            std::string::npos)
      << text;
}

TEST(OpdConfigTest, DuplicateTeacherNames) {
  TempDir dir;
  const std::string path = dir.Write("opd.yaml", OpdYaml("[opd]", "      teacher: t1\n",
                                                         "    - {name: t1, path: /models/a}\n"
                                                         "    - {name: t1, path: /models/b}\n"));
  EXPECT_EQ(ErrorText(LoadRunConfig(path, {})),
            path + ":12:8: opd.teachers[1].name: duplicate teacher name 't1'");
}

TEST(OpdConfigTest, TeacherNeedsNameAndPath) {
  TempDir dir;
  const std::string path =
      dir.Write("opd.yaml", OpdYaml("[opd]", "      teacher: t1\n", "    - {name: t1}\n"));
  const std::string text = ErrorText(LoadRunConfig(path, {}));
  EXPECT_NE(text.find("opd.teachers[0].path: required key is missing"), std::string::npos) << text;
}

TEST(ConfigDocsTest, DocsMatchTheDeclarations) {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/docs/config.md";
  EXPECT_EQ(loom::testing::ReadAll(path), ConfigReferenceMarkdown())
      << "docs/config.md is stale: run `build/bin/loom config docs > docs/config.md`";
}

}  // namespace
}  // namespace loom::config
