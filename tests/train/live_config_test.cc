// LiveConfig: the run config as it stands now, behind a version. An accepted
// change bumps the version and reaches the mix and the teacher slots; a
// refused one names the key and changes nothing; a checkpoint's state puts a
// resumed run back under the same version.

#include "loom/train/live_config.h"

#include <gtest/gtest.h>

#include "loom/model/init.h"
#include "loom/tokenizer/tiny.h"
#include "testing/temp_dir.h"

namespace loom::train {
namespace {

using loom::testing::TempDir;

// Two datasets, two teachers; groups of 4 samples (2 efforts x 2).
config::RunConfig TwoDatasets(const std::string& teachers = "/models") {
  TempDir dir;
  const std::string yaml =
      "run: {name: live}\n"
      "model: {path: m}\n"
      "effort: {levels: [50, 100], samples_per_level: [2]}\n"
      "tasks:\n"
      "  datasets:\n"
      "    - {name: sort, kind: sort, weight: 2, teacher: t1}\n"
      "    - {name: reverse, kind: reverse, max_inflight: 8, teacher: t2}\n"
      "opd:\n"
      "  teachers:\n"
      "    - {name: t1, path: " +
      teachers +
      "/t1}\n"
      "    - {name: t2, path: " +
      teachers +
      "/t2}\n"
      "train: {stages: [opd]}\n";
  auto config = config::LoadRunConfig(dir.Write("live.yaml", yaml), {});
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

TEST(LiveConfigTest, StartsFromTheConfigAtVersionZero) {
  LiveConfig live(TwoDatasets());
  EXPECT_EQ(live.version(), 0);
  ASSERT_EQ(live.datasets().size(), 2u);
  EXPECT_DOUBLE_EQ(live.datasets()[0].weight, 2.0);
  EXPECT_EQ(live.datasets()[1].max_inflight, 8);
  ASSERT_EQ(live.teacher_slots().size(), 2u);
  EXPECT_EQ(live.TeacherSlot(0), 0);
  EXPECT_EQ(live.TeacherSlot(1), 1);
}

TEST(LiveConfigTest, AChangeBumpsTheVersionAndReachesTheMix) {
  LiveConfig live(TwoDatasets());
  auto changes = live.Apply({"tasks.datasets.sort.active=false", "tasks.datasets.1.max_inflight=4",
                             "tasks.eval_every=2"});
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_EQ(changes->size(), 3u);
  EXPECT_EQ(live.version(), 1);
  EXPECT_DOUBLE_EQ(live.datasets()[0].weight, 0.0) << "an inactive dataset is never picked";
  EXPECT_EQ(live.datasets()[1].max_inflight, 4);
  EXPECT_EQ(live.config().tasks.eval_every, 2);
}

TEST(LiveConfigTest, ARefusedChangeNamesTheKeyAndChangesNothing) {
  LiveConfig live(TwoDatasets());
  ASSERT_TRUE(live.Apply({"tasks.datasets.sort.weight=3"}).ok());
  const std::string before = config::ResolvedYaml(live.config());
  auto refused = live.Apply({"tasks.datasets.reverse.max_inflight=3"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "tasks.datasets.reverse.max_inflight: expected 0 (no cap) or at least 4 (one prompt's "
            "group of samples), got 3");
  refused = live.Apply({"tasks.datasets.sort.active=false", "tasks.datasets.reverse.weight=0"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "tasks.datasets: expected at least one active dataset with weight > 0");
  refused = live.Apply({"run.seed=4"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(std::string(refused.status().message()).rfind("run.seed: not live-changeable", 0), 0u);
  EXPECT_EQ(live.version(), 1);
  EXPECT_EQ(config::ResolvedYaml(live.config()), before);
}

TEST(LiveConfigTest, AReplacedTeacherKeepsItsSlotForTheSamplesHoldingIt) {
  LiveConfig live(TwoDatasets());
  ASSERT_TRUE(live.Apply({"opd.teachers.t2.path=/models/t2-better"}).ok());
  ASSERT_EQ(live.teacher_slots().size(), 3u);
  EXPECT_EQ(live.teacher_slots()[1].path, "/models/t2") << "slot 1 stays the old teacher";
  EXPECT_EQ(live.teacher_slots()[2].path, "/models/t2-better");
  EXPECT_EQ(live.TeacherSlot(1), 2) << "new samples of reverse get the replacement";
  // Switch a dataset to another teacher, then remove the unused one.
  ASSERT_TRUE(live.Apply({"tasks.datasets.reverse.teacher=t1", "~opd.teachers.t2"}).ok());
  EXPECT_EQ(live.TeacherSlot(1), 0);
  // The same teacher back again: its old slot, no new one.
  ASSERT_TRUE(live.Apply({"+opd.teachers={name: t2, path: /models/t2-better}",
                          "tasks.datasets.reverse.teacher=t2"})
                  .ok());
  EXPECT_EQ(live.teacher_slots().size(), 3u);
  EXPECT_EQ(live.TeacherSlot(1), 2);
  EXPECT_EQ(live.version(), 3);
}

TEST(LiveConfigTest, RestoredStateIsTheSameVersionOverTheFilesValues) {
  const config::RunConfig file = TwoDatasets();
  LiveConfig live(file);
  ASSERT_TRUE(live.Apply({"tasks.datasets.sort.weight=0.5"}).ok());
  ASSERT_TRUE(
      live.Apply({"opd.teachers.t1.path=/models/t1-new", "tasks.datasets.reverse.teacher=t1"})
          .ok());
  const nlohmann::json state = nlohmann::json::parse(live.State().dump());
  auto restored = LiveConfig::Restore(file, live.version(), state);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->version(), 2);
  EXPECT_EQ(config::ResolvedYaml((*restored)->config()), config::ResolvedYaml(live.config()));
  ASSERT_EQ((*restored)->teacher_slots().size(), 3u);
  EXPECT_EQ((*restored)->TeacherSlot(0), 2);
  EXPECT_EQ((*restored)->TeacherSlot(1), 2);
  EXPECT_DOUBLE_EQ((*restored)->datasets()[0].weight, 0.5);

  for (const char* bad :
       {R"({"assignments": 3, "teacher_slots": []})",
        R"({"assignments": [], "teacher_slots": [{"name": "t1"}]})", R"([1, 2])"}) {
    auto malformed = LiveConfig::Restore(file, 2, nlohmann::json::parse(bad));
    ASSERT_FALSE(malformed.ok()) << bad;
    EXPECT_EQ(malformed.status().code(), absl::StatusCode::kDataLoss) << malformed.status();
  }
  auto misfit = LiveConfig::Restore(file, 2,
                                    {{"assignments", {"tasks.datasets.arith.weight=1.0"}},
                                     {"teacher_slots", nlohmann::json::array()}});
  ASSERT_FALSE(misfit.ok());
  EXPECT_NE(std::string(misfit.status().message()).find("tasks.datasets: no entry 'arith'"),
            std::string::npos)
      << misfit.status();
}

// With the run's teacher pool: a new teacher is checked (model present, the
// student's tokenizer) before the change is accepted.
TEST(LiveConfigTest, ANewTeacherMustPassThePoolsChecks) {
  TempDir dir;
  for (const char* name : {"t1", "t2", "t3"}) {
    model::InitModelOptions options;
    options.arch = "llama";
    options.out_dir = dir / name;
    options.overrides = {"hidden_size=32",        "intermediate_size=48",  "num_hidden_layers=1",
                         "num_attention_heads=2", "num_key_value_heads=1", "head_dim=16"};
    ASSERT_TRUE(model::InitModelDir(options).ok()) << name;
  }
  dir.Write("t3/tokenizer.json", "{}");
  const config::RunConfig config = TwoDatasets(dir.path());
  auto student = tokenizer::Tokenizer::FromJson(tokenizer::TinyTokenizerJson(), "tiny");
  ASSERT_TRUE(student.ok());
  LiveConfig live(config);
  auto pool = algo::TeacherPool::Open(live.teacher_slots(), tokenizer::TinyTokenizerVocabSize(),
                                      **student, {});
  ASSERT_TRUE(pool.ok()) << pool.status();
  live.set_teachers(pool->get());

  auto refused = live.Apply({"+opd.teachers={name: t3, path: " + dir / "t3" + "}"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(std::string(refused.status().message()).rfind("opd.teachers.t3.path: teacher 't3'", 0),
            0u)
      << refused.status();
  refused = live.Apply({"opd.teachers.t1.path=" + dir / "missing"});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("config.json"), std::string::npos);
  EXPECT_EQ((*pool)->size(), 2) << "nothing added to the pool";
  EXPECT_EQ(live.version(), 0);

  ASSERT_TRUE(live.Apply({"+opd.teachers={name: t4, path: " + dir / "t1" + "}",
                          "tasks.datasets.sort.teacher=t4"})
                  .ok());
  EXPECT_EQ((*pool)->size(), 3);
  EXPECT_EQ((*pool)->name(2), "t4");
  EXPECT_EQ(live.TeacherSlot(0), 2);
}

}  // namespace
}  // namespace loom::train
