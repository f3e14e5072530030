// Preemption and exact resume through the real `loom train` binary and real
// signals, on configs/test/preempt.yaml (deterministic SFT then GRPO):
// SIGTERM at random moments, then --resume auto, gives the same per-step
// loss, reward and rollout token counts (so no re-prefill) as an
// uninterrupted run; a second SIGTERM during the save changes nothing;
// kill -9 and a corrupt newest checkpoint still resume; ten SIGTERMs in a
// second checkpoint once; a disk that fills during the checkpoint is a clear
// error that leaves the previous checkpoint to resume from. The same holds
// mid-OPD on configs/test/preempt-opd.yaml (SFT then distillation from two
// teachers of other architectures, one resident at a time).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "loom/metrics/metrics_writer.h"
#include "testing/loom_process.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// (stage, step) -> the last metrics line of that training step.
using Steps = std::map<std::pair<std::string, int64_t>, nlohmann::json>;

Steps ReadSteps(const std::string& run_dir) {
  auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  EXPECT_TRUE(records.ok()) << records.status();
  Steps steps;
  if (!records.ok()) return steps;
  for (const auto& r : *records) {
    if (r.contains("event") || r.contains("eval_accuracy")) continue;
    steps[{r["stage"].get<std::string>(), r["step"].get<int64_t>()}] = r;
  }
  return steps;
}

// Training steps of `stage` in metrics.jsonl so far (a partly written last line
// is not counted).
int CountSteps(const std::string& path, const std::string& stage) {
  std::istringstream lines(testing::ReadAll(path));
  int count = 0;
  for (std::string line; std::getline(lines, line);) {
    auto r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (r.is_object() && r.value("stage", "") == stage && !r.contains("event") &&
        !r.contains("eval_accuracy")) {
      ++count;
    }
  }
  return count;
}

// What a suite preempts: a config, extra `loom train` arguments, and the
// training steps an uninterrupted run logs.
struct Scenario {
  std::string config;
  std::vector<std::string> extra_args;
  size_t steps = 0;
};

// `loom train` on the suite's scenario as a child process.
class TrainProcess : public testing::LoomProcess {
 public:
  // Logs to `log`, by default next to the run directory.
  TrainProcess(const Scenario& scenario, const std::string& run_dir, const std::string& model_dir,
               bool resume, const std::string& log = "")
      : LoomProcess(Args(scenario, run_dir, model_dir, resume),
                    log.empty() ? run_dir + ".out" : log) {}

 private:
  static std::vector<std::string> Args(const Scenario& scenario, const std::string& run_dir,
                                       const std::string& model_dir, bool resume) {
    std::vector<std::string> args = {"train", "--config", scenario.config,          "--run-dir",
                                     run_dir, "--set",    "model.path=" + model_dir};
    args.insert(args.end(), scenario.extra_args.begin(), scenario.extra_args.end());
    if (resume) args.insert(args.end(), {"--resume", "auto"});
    return args;
  }
};

// Waits until metrics.jsonl holds `lines` training steps of `stage` (or the
// process ended); false if it ended first.
bool WaitForSteps(TrainProcess& process, const std::string& run_dir, const std::string& stage,
                  int lines) {
  while (process.Running()) {
    if (CountSteps(run_dir + "/metrics.jsonl", stage) >= lines) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int Occurrences(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

// Waits until the process has logged `needle` `count` times in total.
bool WaitForLog(TrainProcess& process, const std::string& log, const std::string& needle,
                int count) {
  while (process.Running()) {
    if (Occurrences(testing::ReadAll(log), needle) >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Spins until a checkpoint's temporary directory exists under `root`; false
// if the process ended or 20 s passed first.
bool WaitForTempDir(TrainProcess& process, const std::string& root) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end && process.Running()) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      if (entry.path().filename().string().rfind(".tmp-", 0) == 0) return true;
    }
  }
  return false;
}

class PreemptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    // train.sft.steps + train.grpo.steps
    SetUpScenario({LOOM_SOURCE_DIR "/configs/test/preempt.yaml", {}, 20u + 24u});
  }
  // Runs the scenario uninterrupted: the baseline every test compares with.
  static void SetUpScenario(Scenario scenario) {
    scenario_ = new Scenario(std::move(scenario));
    baseline_ = new Steps;
    TrainProcess baseline(*scenario_, *dir_ / "baseline", *dir_ / "model", false);
    ASSERT_EQ(baseline.Wait(), 0) << testing::ReadAll(*dir_ / "baseline.out");
    *baseline_ = ReadSteps(*dir_ / "baseline");
    ASSERT_EQ(baseline_->size(), scenario_->steps);
  }
  static void TearDownTestSuite() {
    delete baseline_;
    delete scenario_;
    delete dir_;
  }

  static TrainProcess Start(const std::string& run_dir, bool resume) {
    return TrainProcess(*scenario_, run_dir, *dir_ / "model", resume);
  }

  // Resumes `run_dir` until it finishes.
  static void ResumeToEnd(const std::string& run_dir) {
    TrainProcess resumed = Start(run_dir, true);
    ASSERT_EQ(resumed.Wait(), 0) << testing::ReadAll(run_dir + ".out");
  }

  // SIGTERMs a fresh run of `run_dir` a random number of `stage` steps in
  // (from `min_steps` to 16) and a random moment later, resumes it to its
  // end, and expects the baseline's steps.
  static void SigtermOnceThenResume(const std::string& run_dir, const std::string& stage,
                                    int min_steps) {
    const unsigned seed = std::random_device()();
    std::mt19937 rng(seed);
    SCOPED_TRACE("random seed " + std::to_string(seed));
    TrainProcess process = Start(run_dir, false);
    ASSERT_TRUE(WaitForSteps(process, run_dir, stage,
                             std::uniform_int_distribution<int>(min_steps, 16)(rng)))
        << "ended early: " << testing::ReadAll(run_dir + ".out");
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 300)(rng)));
    process.Signal(SIGTERM);
    ASSERT_EQ(process.Wait(), 0) << testing::ReadAll(run_dir + ".out");
    ResumeToEnd(run_dir);
    ExpectSameAsBaseline(run_dir);
  }

  static void ExpectSameAsBaseline(const std::string& run_dir) {
    Steps steps = ReadSteps(run_dir);
    ASSERT_EQ(steps.size(), baseline_->size()) << testing::ReadAll(run_dir + ".out");
    for (const auto& [key, want] : *baseline_) {
      const nlohmann::json& got = steps[key];
      const std::string where = key.first + " step " + std::to_string(key.second);
      EXPECT_NEAR(got["loss"].get<double>(), want["loss"].get<double>(), 1e-6) << where;
      if (key.first == "sft") continue;
      EXPECT_NEAR(got["reward_mean"].get<double>(), want["reward_mean"].get<double>(), 1e-6)
          << where;
      if (key.first == "opd") {
        EXPECT_NEAR(got["kl"].get<double>(), want["kl"].get<double>(), 1e-6) << where;
      }
      // Equal rollout work per step: a re-prefill of restored samples would show here.
      EXPECT_EQ(got["prefill_tokens"], want["prefill_tokens"]) << where;
      EXPECT_EQ(got["decode_tokens"], want["decode_tokens"]) << where;
    }
  }

  static TempDir* dir_;
  static Scenario* scenario_;
  static Steps* baseline_;
};

TempDir* PreemptTest::dir_ = nullptr;
Scenario* PreemptTest::scenario_ = nullptr;
Steps* PreemptTest::baseline_ = nullptr;

TEST_F(PreemptTest, SigtermAtRandomMomentsThenResumeEqualsUninterrupted) {
  const unsigned seed = std::random_device()();
  std::mt19937 rng(seed);
  SCOPED_TRACE("random seed " + std::to_string(seed));
  const std::string run_dir = *dir_ / "preempted";
  // Once in SFT, once in GRPO (mid-rollout, with samples in flight), each a
  // random number of steps in and a random delay after it.
  const std::vector<std::pair<std::string, int>> moments = {
      {"sft", std::uniform_int_distribution<int>(1, 18)(rng)},
      {"grpo", std::uniform_int_distribution<int>(1, 20)(rng)}};
  bool first = true;
  for (const auto& [stage, steps] : moments) {
    const std::string log = run_dir + ".out";
    const int resumes = Occurrences(testing::ReadAll(log), "resuming from");
    TrainProcess process = Start(run_dir, !first);
    // A resumed run has its signal handlers once it says where it resumes.
    if (!first) {
      ASSERT_TRUE(WaitForLog(process, log, "resuming from", resumes + 1));
    }
    first = false;
    const int done = CountSteps(run_dir + "/metrics.jsonl", stage);
    ASSERT_TRUE(WaitForSteps(process, run_dir, stage, std::max(steps, done)))
        << "ended early: " << testing::ReadAll(log);
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
    process.Signal(stage == "sft" ? SIGTERM : SIGUSR1);
    ASSERT_EQ(process.Wait(), 0) << testing::ReadAll(run_dir + ".out");
  }
  ResumeToEnd(run_dir);
  ExpectSameAsBaseline(run_dir);
  const std::string log = testing::ReadAll(run_dir + ".out");
  EXPECT_NE(log.find("preempted; checkpoint written"), std::string::npos) << log;
  auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(records.ok());
  int64_t restored = 0;
  for (const auto& r : *records) {
    if (r.value("event", "") == "resume" && r["stage"] == "grpo") {
      restored += r["inflight_restored"].get<int64_t>();
      EXPECT_EQ(r["kv_tokens_restored"].get<int64_t>() > 0, r["inflight_restored"] > 0) << r;
    }
  }
  EXPECT_GT(restored, 0) << "no in-flight sample was saved mid-GRPO";
}

TEST_F(PreemptTest, SecondSigtermDuringTheSaveChangesNothing) {
  const std::string run_dir = *dir_ / "twice";
  TrainProcess process = Start(run_dir, false);
  // After GRPO step 1 (policy version 21) no periodic save is due (every_steps
  // 8), so the save that follows is the preemption's.
  ASSERT_TRUE(WaitForSteps(process, run_dir, "grpo", 1));
  process.Signal(SIGTERM);
  // The second one lands while the checkpoint is being written: as soon as
  // its temporary directory appears (the save fsyncs the model, optimizer
  // and samples with KV, which takes milliseconds).
  const bool mid_save = WaitForTempDir(process, run_dir + "/checkpoints");
  process.Signal(SIGTERM);
  ASSERT_EQ(process.Wait(), 0) << testing::ReadAll(run_dir + ".out");
  EXPECT_TRUE(mid_save) << "the save was not caught in progress";
  ResumeToEnd(run_dir);
  ExpectSameAsBaseline(run_dir);
}

TEST_F(PreemptTest, TenSigtermsWithinASecondCheckpointOnce) {
  const std::string run_dir = *dir_ / "ten";
  TrainProcess process = Start(run_dir, false);
  ASSERT_TRUE(WaitForSteps(process, run_dir, "grpo", 1));
  for (int i = 0; i < 10; ++i) {
    process.Signal(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(process.Wait(), 0) << testing::ReadAll(run_dir + ".out");
  EXPECT_EQ(Occurrences(testing::ReadAll(run_dir + ".out"), "preempted; checkpoint written"), 1);
  ResumeToEnd(run_dir);
  ExpectSameAsBaseline(run_dir);
}

// Writes zeros to `path` until its file system has at most `room` bytes left.
void FillUp(const std::string& path, int64_t room) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  std::setvbuf(file, nullptr, _IONBF, 0);
  const std::string chunk(1 << 14, '\0');
  auto available = [&] {
    struct statvfs st;
    statvfs(path.c_str(), &st);
    return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_bsize);
  };
  while (available() > room && std::fwrite(chunk.data(), 1, chunk.size(), file) == chunk.size()) {
  }
  std::fclose(file);
}

TEST_F(PreemptTest, DiskFullDuringTheCheckpointKeepsThePreviousOne) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  const std::string small = *dir_ / "small";
  fs::create_directories(small);
  ASSERT_EQ(mount("loom-test", small.c_str(), "tmpfs", 0, "size=64m"), 0) << std::strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{small};
  // The run on the small file system; its log beside it, where there is room.
  const std::string run_dir = small + "/run", log = *dir_ / "full.out";
  TrainProcess process(*scenario_, run_dir, *dir_ / "model", false, log);
  // By GRPO step 1 the checkpoints of SFT steps 8 and 16 are committed.
  ASSERT_TRUE(WaitForSteps(process, run_dir, "grpo", 1)) << testing::ReadAll(log);
  const std::string latest = testing::ReadAll(run_dir + "/checkpoints/latest");
  // Room for the metrics and samples lines of a few more steps, not for a
  // checkpoint (a few MB).
  FillUp(small + "/filler", 256 << 10);
  process.Signal(SIGTERM);
  EXPECT_EQ(process.Wait(), 1) << testing::ReadAll(log);
  const std::string out = testing::ReadAll(log);
  EXPECT_NE(out.find("cannot write " + run_dir + "/checkpoints/"), std::string::npos) << out;
  EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
  EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
  for (const auto& entry : fs::directory_iterator(run_dir + "/checkpoints")) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u)
        << "the half-written checkpoint was left: " << entry.path();
  }
  EXPECT_EQ(testing::ReadAll(run_dir + "/checkpoints/latest"), latest);
  // With room again, the run resumes from the checkpoint it had and ends as
  // an uninterrupted one.
  fs::remove(small + "/filler");
  TrainProcess resumed(*scenario_, run_dir, *dir_ / "model", true, log);
  ASSERT_EQ(resumed.Wait(), 0) << testing::ReadAll(log);
  EXPECT_NE(testing::ReadAll(log).find("resuming from " + run_dir + "/checkpoints/"),
            std::string::npos);
  ExpectSameAsBaseline(run_dir);
}

TEST_F(PreemptTest, KillNineThenCorruptNewestCheckpointStillResumes) {
  const std::string run_dir = *dir_ / "killed";
  TrainProcess process = Start(run_dir, false);
  // ckpt.every_steps 8 and 20 SFT steps: by GRPO step 5 the checkpoints of
  // policy versions 16 (in SFT) and 24 (after GRPO step 4) are committed.
  ASSERT_TRUE(WaitForSteps(process, run_dir, "grpo", 5));
  process.Signal(SIGKILL);
  process.Wait();
  // Corrupt the checkpoint `latest` names: --resume auto must skip it, saying so.
  const std::string root = run_dir + "/checkpoints";
  std::string latest = testing::ReadAll(root + "/latest");
  latest.erase(latest.find_last_not_of("\n") + 1);
  const std::string corrupt = root + "/" + latest + "/optimizer.safetensors";
  ASSERT_TRUE(fs::exists(corrupt)) << corrupt;
  {
    std::fstream file(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-3, std::ios::end);
    file.write("xyz", 3);
  }
  auto explicit_path = testing::RunLoom("train --config configs/test/preempt.yaml --run-dir " +
                                        run_dir + " --set model.path=" + (*dir_ / "model") +
                                        " --resume " + root + "/" + latest);
  EXPECT_EQ(explicit_path.exit_code, 1);
  EXPECT_NE(explicit_path.err.find("checksum mismatch"), std::string::npos) << explicit_path.err;
  ResumeToEnd(run_dir);
  const std::string log = testing::ReadAll(run_dir + ".out");
  EXPECT_NE(log.find("skipping checkpoint " + root + "/" + latest), std::string::npos) << log;
  ExpectSameAsBaseline(run_dir);
}

// GRPO with a difficulty filter on a file of ten tasks, drawn over and over
// (beside the unfiltered arithmetic generator): the filter's tallies and retirements are
// checkpointed, so the resumed run skips the same tasks and retires the same ones at the same
// steps.
class FilterPreemptTest : public PreemptTest {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    std::istringstream lines(testing::ReadAll(LOOM_SOURCE_DIR "/configs/tasks/filter-train.jsonl"));
    std::string ten;
    std::string line;
    for (int i = 0; i < 10 && std::getline(lines, line); ++i) ten += line + "\n";
    const std::string file = dir_->Write("ten.jsonl", ten);
    SetUpScenario(
        {LOOM_SOURCE_DIR "/configs/test/preempt.yaml",
         {"--set", "train.stages=[grpo]", "--set", "tasks.datasets.sort.kind=jsonl", "--set",
          "tasks.datasets.sort.path=" + file, "--set", "tasks.datasets.sort.eval_path=" + file,
          "--set", "tasks.datasets.sort.filter.after_attempts=5", "--set",
          "tasks.datasets.sort.filter.min_pass=0.2", "--set",
          "tasks.datasets.sort.filter.max_pass=0.8"},
         24u});  // train.grpo.steps (the lines have no SFT references)
  }
};

TEST_F(FilterPreemptTest, SigtermMidGrpoThenResumeRetiresAndSkipsAsUninterrupted) {
  const std::string run_dir = *dir_ / "preempted";
  SigtermOnceThenResume(run_dir, "grpo", 2);
  if (HasFatalFailure()) return;

  const std::string retired = testing::ReadAll(*dir_ / "baseline/retired_tasks.jsonl");
  EXPECT_GT(Occurrences(retired, "\"task\""), 0) << "the filter retired nothing";
  EXPECT_EQ(testing::ReadAll(run_dir + "/retired_tasks.jsonl"), retired);
  int64_t skipped = 0;
  for (const auto& [key, line] : *baseline_) {
    if (key.first != "grpo") continue;
    skipped += line["problems_skipped"].get<int64_t>();
    EXPECT_EQ(ReadSteps(run_dir)[key]["tasks_retired_by_dataset"], line["tasks_retired_by_dataset"])
        << "grpo step " << key.second;
  }
  EXPECT_GT(skipped, 0) << "no retired task came up again";
}

// A band no task can stay in ([0.5, 0.5] on one attempt) retires every task
// of the file on its first verdict; with the generator beside it weighted
// out, nothing is left to draw: the stage ends early, cleanly, and is
// evaluated where it ended.
TEST_F(FilterPreemptTest, AStageWhoseEveryTaskRetiresEndsEarlyAndIsEvaluatedThere) {
  Scenario scenario = *scenario_;
  for (const char* assignment :
       {"tasks.datasets.arithmetic.weight=0", "tasks.datasets.sort.filter.min_pass=0.5",
        "tasks.datasets.sort.filter.max_pass=0.5", "tasks.datasets.sort.filter.after_attempts=1",
        "tasks.datasets.sort.filter.window=1"}) {
    scenario.extra_args.insert(scenario.extra_args.end(), {"--set", assignment});
  }
  const std::string run_dir = *dir_ / "all-retired";
  TrainProcess run(scenario, run_dir, *dir_ / "model", false);
  ASSERT_EQ(run.Wait(), 0) << testing::ReadAll(run_dir + ".out");
  const std::string log = testing::ReadAll(run_dir + ".out");
  EXPECT_NE(log.find("every task left to draw is retired (tasks.datasets[].filter: sort)"),
            std::string::npos)
      << log;
  const Steps steps = ReadSteps(run_dir);
  ASSERT_FALSE(steps.empty());
  EXPECT_LT(steps.size(), scenario_->steps);
  EXPECT_EQ(Occurrences(testing::ReadAll(run_dir + "/retired_tasks.jsonl"), "\"task\""), 10);
  auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(records.ok());
  ASSERT_TRUE(records->back().contains("eval_accuracy")) << records->back();
  EXPECT_EQ(records->back()["step"].get<int64_t>(), static_cast<int64_t>(steps.size()));
  EXPECT_TRUE(fs::exists(run_dir + "/stages/grpo/config.json"));
}

// SFT then OPD from two teachers (a Qwen3 and a Llama, one resident at a time).
class OpdPreemptTest : public PreemptTest {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    std::vector<std::string> extra_args;
    std::string teachers;
    for (const char* arch : {"qwen3", "llama"}) {
      const std::string path = *dir_ / (std::string("teacher-") + arch);
      auto made = testing::RunLoom(std::string("init-model --arch ") + arch + " --out " + path +
                                   " --seed 11 --set hidden_size=64 --set num_hidden_layers=2");
      ASSERT_EQ(made.exit_code, 0) << made.err;
      teachers +=
          std::string(teachers.empty() ? "" : ", ") + "{name: " + arch + ", path: " + path + "}";
    }
    // train.sft.steps + train.opd.steps
    SetUpScenario({LOOM_SOURCE_DIR "/configs/test/preempt-opd.yaml",
                   {"--set", "opd.teachers=[" + teachers + "]"},
                   20u + 20u});
  }
};

TEST_F(OpdPreemptTest, SigtermMidOpdThenResumeEqualsUninterrupted) {
  const std::string run_dir = *dir_ / "preempted";
  SigtermOnceThenResume(run_dir, "opd", 1);
  if (HasFatalFailure()) return;
  auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(records.ok());
  bool resumed_in_opd = false;
  int64_t evictions = 0;
  for (const auto& r : *records) {
    if (r.value("event", "") == "resume" && r["stage"] == "opd") {
      resumed_in_opd = true;
      // async.max_inflight 20 over batches of 10: samples are always in flight.
      EXPECT_GT(r["inflight_restored"].get<int64_t>(), 0) << r;
    }
    if (r.value("stage", "") == "opd" && r.contains("teacher_evictions")) {
      evictions += r["teacher_evictions"].get<int64_t>();
      EXPECT_LE(r["teachers_resident"].get<int64_t>(), 1) << r;
    }
  }
  EXPECT_TRUE(resumed_in_opd) << testing::ReadAll(run_dir + ".out");
  EXPECT_GT(evictions, 0) << "the budget never made a teacher leave";
}

}  // namespace
}  // namespace loom
