// `loom train` with an opd stage end to end, through the real binary and real
// model directories: forty tiny teachers of four architectures (one made on
// the fly from its companion config) under a budget that holds four, and the
// start-up refusals — a teacher with another tokenizer, a missing teacher —
// before any stage runs.

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "loom/metrics/metrics_writer.h"
#include "testing/loom_process.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::RunLoom;
using testing::TempDir;

constexpr int kTeachers = 40, kOpdSteps = 3;
constexpr const char* kArchs[] = {"llama", "qwen2", "qwen3", "qwen3_moe"};

// A companion config that makes a teacher by `steps` SFT steps into
// `dir`/t0-run/stages/sft.
std::string Companion(const TempDir& dir, int steps) {
  return dir.Write("t0.yaml",
                   "base: " LOOM_SOURCE_DIR
                   "/configs/test/e2e.yaml\n"
                   "run: {name: t0, dir: " +
                       (dir / "t0-run") +
                       "}\n"
                       "model: {path: " +
                       (dir / "t0-init") +
                       ", arch: qwen3, init: "
                       "{hidden_size: 32, num_hidden_layers: 1, intermediate_size: 64}}\n"
                       "ckpt: {every_steps: 1000}\n"
                       "train: {stages: [sft], sft: {steps: " +
                       std::to_string(steps) + ", batch_sequences: 4}}\n");
}

// A teacher directory: `arch`, tiny, seeded.
void MakeTeacher(const std::string& path, const std::string& arch, int seed) {
  auto made =
      RunLoom("init-model --arch " + arch + " --out " + path + " --seed " + std::to_string(seed) +
              " --set hidden_size=32 --set num_hidden_layers=1 --set intermediate_size=64");
  ASSERT_EQ(made.exit_code, 0) << made.err;
}

// A config of `teachers` arithmetic datasets, dataset i taught by teacher i,
// over configs/test/e2e.yaml. `first_teacher` is teacher 0's entry.
std::string OpdConfig(const TempDir& dir, int teachers, const std::string& first_teacher) {
  std::string yaml = "base: " LOOM_SOURCE_DIR
                     "/configs/test/e2e.yaml\n"
                     "run: {name: opd-e2e}\n"
                     "effort: {levels: [100], samples_per_level: [2], in_prompt: false}\n"
                     "async: {max_inflight: 40, batch_samples: 40, max_staleness: 1}\n"
                     "train:\n  stages: [sft, opd]\n  sft: {steps: 2, batch_sequences: 4}\n"
                     "  opd: {steps: " +
                     std::to_string(kOpdSteps) +
                     ", lr: 1.0e-3}\n"
                     "tasks:\n  eval_every: 0\n  datasets:\n";
  for (int t = 0; t < teachers; ++t) {
    yaml += "    - {name: d" + std::to_string(t) +
            ", kind: arithmetic, min_difficulty: 1, max_difficulty: 1, eval_size: 2, teacher: t" +
            std::to_string(t) + "}\n";
  }
  yaml += "opd:\n  teacher_memory_bytes: 590000\n  teachers:\n    - " + first_teacher + "\n";
  for (int t = 1; t < teachers; ++t) {
    yaml += "    - {name: t" + std::to_string(t) + ", path: " + (dir / ("t" + std::to_string(t))) +
            "}\n";
  }
  return dir.Write("opd.yaml", yaml);
}

std::vector<json> Metrics(const std::string& run_dir) {
  auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  EXPECT_TRUE(records.ok()) << records.status();
  return records.ok() ? *records : std::vector<json>{};
}

TEST(OpdEndToEndTest, FortyTeachersOfFourArchitecturesUnderABudgetOfFour) {
  TempDir dir;
  for (int t = 1; t < kTeachers; ++t) {
    MakeTeacher(dir / ("t" + std::to_string(t)), kArchs[t % 4], 100 + t);
  }
  // Teacher 0 does not exist yet: its companion config makes it (2 SFT steps).
  const std::string companion = Companion(dir, 2);
  const std::string t0 = dir / "t0-run/stages/sft";
  const std::string config =
      OpdConfig(dir, kTeachers, "{name: t0, path: " + t0 + ", config: " + companion + "}");
  // Every teacher is checked at start: each needs 120 to 146 kB, the budget
  // (590 kB) holds four at most.
  auto run = RunLoom("train --config " + config + " --run-dir " + (dir / "run") +
                     " --set model.path=" + (dir / "student"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("training it with " + companion), std::string::npos) << run.err;
  EXPECT_TRUE(fs::exists(t0 + "/model.safetensors"));

  std::set<std::string> taught;
  int steps = 0, teacher_evals = 0;
  int64_t loads = 0, evictions = 0;
  for (const json& r : Metrics(dir / "run")) {
    if (r.value("event", "") == "teacher_eval") {
      ++teacher_evals;
      EXPECT_EQ(r["eval_accuracy_by_dataset"].size(), 1u) << r;  // only the dataset it teaches
      continue;
    }
    if (r.value("stage", "") != "opd" || !r.contains("kl")) continue;
    ++steps;
    EXPECT_LE(r["teachers_resident"].get<int64_t>(), 4) << r;
    EXPECT_GT(r["kl"].get<double>(), 0) << r;  // random teachers disagree with the student
    loads += r["teacher_loads"].get<int64_t>();
    evictions += r["teacher_evictions"].get<int64_t>();
    // Each teacher is brought in at most once per step.
    EXPECT_LE(r["teacher_loads"].get<int64_t>(), r["kl_by_teacher"].size()) << r;
    for (const auto& [teacher, kl] : r["kl_by_teacher"].items()) {
      taught.insert(teacher);
      EXPECT_EQ(r["kl_by_dataset"].value("d" + teacher.substr(1), -1.0), kl.get<double>())
          << "dataset and teacher pair up one to one: " << r;
    }
  }
  EXPECT_EQ(steps, kOpdSteps);
  EXPECT_EQ(teacher_evals, kTeachers);
  // 120 samples over 40 datasets reach most teachers, and every load beyond
  // the fourth evicts one.
  EXPECT_GE(taught.size(), 20u);
  EXPECT_GT(evictions, 0);
  EXPECT_GE(loads, static_cast<int64_t>(taught.size()));
  EXPECT_TRUE(fs::exists(dir / "run/stages/opd/model.safetensors"));
}

TEST(OpdEndToEndTest, PreemptedWhileMakingATeacherThenResumed) {
  TempDir dir;
  MakeTeacher(dir / "t1", "llama", 3);
  const std::string t0 = dir / "t0-run/stages/sft";
  const std::string config =
      OpdConfig(dir, 2, "{name: t0, path: " + t0 + ", config: " + Companion(dir, 1500) + "}");
  const std::vector<std::string> args = {"train",
                                         "--config",
                                         config,
                                         "--run-dir",
                                         dir / "run",
                                         "--set",
                                         "model.path=" + (dir / "student"),
                                         "--resume",
                                         "auto"};
  const std::string log = dir / "parent.out";
  {
    // SIGTERM to the parent alone, while its child trains the teacher: the
    // child checkpoints and stops, the parent exits 0 as preempted.
    testing::LoomProcess parent(args, log);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (parent.Running() &&
           testing::ReadAll(log).find("stage sft begins") == std::string::npos &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(parent.Running()) << testing::ReadAll(log);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    parent.Signal(SIGTERM);
    EXPECT_EQ(parent.Wait(), 0) << testing::ReadAll(log);
  }
  EXPECT_NE(testing::ReadAll(log).find("preempted"), std::string::npos) << testing::ReadAll(log);
  EXPECT_FALSE(fs::exists(t0));
  EXPECT_TRUE(fs::exists(dir / "t0-run/checkpoints/latest")) << testing::ReadAll(log);
  EXPECT_FALSE(fs::exists(dir / "run/stages/sft"));
  // The same command again: the child resumes its checkpoint, then the run goes on.
  testing::LoomProcess again(args, dir / "again.out");
  EXPECT_EQ(again.Wait(), 0) << testing::ReadAll(dir / "again.out");
  EXPECT_NE(testing::ReadAll(dir / "again.out").find("resuming from"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "run/stages/opd/model.safetensors"));
}

TEST(OpdEndToEndTest, TeacherWithAnotherTokenizerIsRefusedBeforeAnyStage) {
  TempDir dir;
  for (int t = 0; t < 2; ++t) MakeTeacher(dir / ("t" + std::to_string(t)), kArchs[t], 7 + t);
  // Teacher 1's tokenizer.json spells one byte token differently.
  const std::string tokenizer = dir / "t1/tokenizer.json";
  std::string text = testing::ReadAll(tokenizer);
  const size_t at = text.find("\"a\":");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 4, "\"A\":");
  const size_t upper = text.find("\"A\":", at + 4);
  if (upper != std::string::npos) text.replace(upper, 4, "\"a\":");
  dir.Write("t1/tokenizer.json", text);
  const std::string config = OpdConfig(dir, 2, "{name: t0, path: " + (dir / "t0") + "}");
  auto run = RunLoom("train --config " + config + " --run-dir " + (dir / "run") +
                     " --set model.path=" + (dir / "student"));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("teacher 't1'"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("tokenizer"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(dir / "run/stages/sft")) << "a stage ran before the refusal";
}

TEST(OpdEndToEndTest, MissingTeacherIsRefusedBeforeAnyStage) {
  TempDir dir;
  MakeTeacher(dir / "t1", "llama", 3);
  const std::string config = OpdConfig(dir, 2, "{name: t0, path: " + (dir / "absent") + "}");
  auto run = RunLoom("train --config " + config + " --run-dir " + (dir / "run") +
                     " --set model.path=" + (dir / "student"));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("teacher 't0' (" + (dir / "absent") + ")"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(dir / "run/stages/sft"));
}

}  // namespace
}  // namespace loom
