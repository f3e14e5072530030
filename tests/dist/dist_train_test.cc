// Multi-rank SFT through the real binary: `loom launch` and ranks started by
// hand with torchrun's variables, Gloo on 127.0.0.1 (configs/test/dist-sft.yaml).
// Two ranks train like one on the same global batch, hold identical weights
// after every step, stop together when one is killed, hangs or is preempted,
// and a preempted 2-rank run resumes exactly, on 2 ranks or on 1.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "loom/dist/launch.h"
#include "testing/loom_process.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::LoomProcess;
using testing::ReadAll;
using testing::RunCommand;
using testing::RunLoom;
using testing::TempDir;

const std::string kConfig = std::string(LOOM_SOURCE_DIR) + "/configs/test/dist-sft.yaml";

// The training step lines of a metrics file, in order.
std::vector<nlohmann::json> StepLines(const std::string& path) {
  std::vector<nlohmann::json> steps;
  std::istringstream lines(ReadAll(path));
  for (std::string line; std::getline(lines, line);) {
    auto r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (r.is_object() && r.contains("loss") && !r.contains("eval_accuracy")) steps.push_back(r);
  }
  return steps;
}

// Every JSON object line of a file, in order.
std::vector<nlohmann::json> JsonLines(const std::string& path) {
  std::vector<nlohmann::json> objects;
  std::istringstream lines(ReadAll(path));
  for (std::string line; std::getline(lines, line);) {
    auto r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (r.is_object()) objects.push_back(r);
  }
  return objects;
}

// Eval lines (rank 0's metrics), in order.
std::vector<nlohmann::json> EvalLines(const std::string& path) {
  std::vector<nlohmann::json> evals;
  std::istringstream lines(ReadAll(path));
  for (std::string line; std::getline(lines, line);) {
    auto r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_object() && r.contains("eval_accuracy")) evals.push_back(r);
  }
  return evals;
}

// Same steps, losses within `tolerance`.
void ExpectSameLosses(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b,
                      double tolerance) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), tolerance)
        << "step " << i + 1;
  }
}

class DistTrainTest : public ::testing::Test {
 protected:
  // `loom train` on the test config with `args` appended; the model is created once.
  std::string Train(const std::string& args) const {
    return "train --config " + kConfig + " --set model.path=" + model_ + " " + args;
  }

  // Waits until `path` holds `steps` step lines (false after 120 s).
  static bool WaitForSteps(const std::string& path, size_t steps) {
    for (int i = 0; i < 1200; ++i) {
      if (StepLines(path).size() >= steps) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // Waits for `process` to exit; its status, and the seconds it took.
  static std::pair<int, double> WaitTimed(LoomProcess& process) {
    const auto start = std::chrono::steady_clock::now();
    const int code = process.Wait();
    return {code, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  }

  // `loom <train>` on 1 rank into `one` and on 2 ranks (`loom launch`) into
  // `two`: the step lines of the 1-rank run and of each rank.
  struct OneAndTwo {
    std::vector<nlohmann::json> reference, rank0, rank1;
  };
  static OneAndTwo TrainOnOneAndTwo(const std::string& train, const std::string& one,
                                    const std::string& two) {
    auto single = RunLoom(train + " --run-dir " + one);
    EXPECT_EQ(single.exit_code, 0) << single.err << ReadAll(one + "/log.txt");
    auto launched = RunLoom("launch --nproc 2 -- " + train + " --run-dir " + two);
    EXPECT_EQ(launched.exit_code, 0) << launched.err << ReadAll(two + "/log.rank1.txt");
    return {StepLines(one + "/metrics.jsonl"), StepLines(two + "/metrics.jsonl"),
            StepLines(two + "/metrics.rank1.jsonl")};
  }

  // Two ranks started by hand, as torchrun would, on run directory `run`.
  struct Ranks {
    std::unique_ptr<LoomProcess> rank0, rank1;
  };
  Ranks StartRanks(const std::string& run, const std::string& extra) const {
    auto port = dist::FreeLoopbackPort();
    EXPECT_TRUE(port.ok());
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(*port).c_str(), 1);
    Ranks ranks;
    std::vector<std::string> args = {
        "train", "--config", kConfig, "--set", "model.path=" + model_, "--run-dir", run};
    std::istringstream words(extra);
    for (std::string w; words >> w;) args.push_back(w);
    ::setenv("RANK", "0", 1);
    ranks.rank0 = std::make_unique<LoomProcess>(args, run + ".rank0.log");
    ::setenv("RANK", "1", 1);
    ranks.rank1 = std::make_unique<LoomProcess>(args, run + ".rank1.log");
    for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(name);
    return ranks;
  }

  TempDir dir_;
  std::string model_ = dir_ / "model";
};

// The same global batch on 1 and on 2 ranks: the same loss at every step
// (float sums in another order), the same weights on both ranks after every
// step, held-out evaluation split between the ranks over the same problems.
TEST_F(DistTrainTest, TwoRanksTrainLikeOneAndStayIdentical) {
  for (const char* deterministic : {"true", "false"}) {
    SCOPED_TRACE(std::string("run.deterministic=") + deterministic);
    const std::string one = dir_ / (std::string("one-") + deterministic);
    const std::string two = dir_ / (std::string("two-") + deterministic);
    const std::string set = std::string(" --set run.deterministic=") + deterministic;
    const auto [reference, rank0, rank1] = TrainOnOneAndTwo(Train(set), one, two);
    ASSERT_EQ(reference.size(), 12u);
    ExpectSameLosses(reference, rank0, 1e-5);
    ExpectSameLosses(rank0, rank1, 0);  // the reduced loss: the same bits on both ranks
    for (size_t i = 0; i < rank0.size(); ++i) {
      EXPECT_EQ(rank0[i]["ranks"], 2);
      EXPECT_EQ(rank0[i]["tokens"], reference[i]["tokens"]);
      // Each rank trained on its half, and the halves make up the batch.
      EXPECT_EQ(rank0[i]["rank_tokens"].get<int64_t>() + rank1[i]["rank_tokens"].get<int64_t>(),
                reference[i]["tokens"].get<int64_t>());
      EXPECT_EQ(rank0[i]["weights_checksum"].get<double>(),
                rank1[i]["weights_checksum"].get<double>())
          << "step " << i + 1;
      EXPECT_NEAR(rank0[i]["grad_norm"].get<double>(), reference[i]["grad_norm"].get<double>(),
                  1e-4 * reference[i]["grad_norm"].get<double>());
    }
    // Evaluation: every problem once, split between the ranks and summed.
    const auto evals_one = EvalLines(one + "/metrics.jsonl");
    const auto evals_two = EvalLines(two + "/metrics.jsonl");
    ASSERT_EQ(evals_one.size(), 2u);
    ASSERT_EQ(evals_two.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(evals_two[i]["eval_parse_rate"].get<double>(),
                  evals_one[i]["eval_parse_rate"].get<double>(), 1.0 / 16 + 1e-9);
      EXPECT_NEAR(evals_two[i]["eval_mean_length"].get<double>(),
                  evals_one[i]["eval_mean_length"].get<double>(), 1.0);
    }
    EXPECT_NE(ReadAll(two + "/log.txt").find("over 16 problems"), std::string::npos);
    // Rank 0 writes the run's files; rank 1 its own log and metrics.
    EXPECT_TRUE(fs::exists(two + "/stages/sft/model.safetensors"));
    EXPECT_TRUE(fs::exists(two + "/log.rank1.txt"));
    EXPECT_EQ(ReadAll(two + "/log.rank1.txt").find("stage sft done"), std::string::npos);
  }
}

// A rank killed mid-run: the other's next all-reduce fails when the
// connection closes, long before dist.timeout_s (120 s), with an error that
// says so; the launcher exits with the killed rank's status.
TEST_F(DistTrainTest, AKilledRankStopsTheOtherAtOnce) {
  const std::string run = dir_ / "killed";
  Ranks ranks = StartRanks(run, "--set train.sft.steps=100000");
  ASSERT_TRUE(WaitForSteps(run + "/metrics.rank1.jsonl", 2)) << ReadAll(run + ".rank1.log");
  ranks.rank1->Signal(SIGKILL);
  auto [code, seconds] = WaitTimed(*ranks.rank0);
  EXPECT_EQ(code, 1);
  EXPECT_LT(seconds, 20.0);
  const std::string log = ReadAll(run + ".rank0.log");
  EXPECT_NE(log.find("rank 0 of 2: all-reduce failed (a peer rank exited"), std::string::npos)
      << log;
}

// A rank that stops answering (SIGSTOP) holds its connections open: the
// other gives up after dist.timeout_s.
TEST_F(DistTrainTest, AHungRankTimesOutTheOther) {
  const std::string run = dir_ / "hung";
  Ranks ranks = StartRanks(run, "--set train.sft.steps=100000 --set dist.timeout_s=3");
  ASSERT_TRUE(WaitForSteps(run + "/metrics.rank1.jsonl", 2)) << ReadAll(run + ".rank1.log");
  ranks.rank1->Signal(SIGSTOP);
  auto [code, seconds] = WaitTimed(*ranks.rank0);
  ranks.rank1->Signal(SIGKILL);
  EXPECT_EQ(code, 1);
  EXPECT_GE(seconds, 2.0);
  EXPECT_LT(seconds, 30.0);
  const std::string log = ReadAll(run + ".rank0.log");
  EXPECT_NE(log.find("within 3 s"), std::string::npos) << log;
}

// Rank 1 never starts: rank 0 waits dist.join_timeout_s for it (not
// dist.timeout_s, which a rank starting late must not run into), then exits
// before any step with an error naming the rendezvous.
TEST_F(DistTrainTest, ARankThatNeverStartsEndsTheRunAfterTheJoinTimeout) {
  const std::string run = dir_ / "alone";
  auto port = dist::FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  const std::string env =
      "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(*port) + " " +
      std::string(LOOM_BINARY) + " ";
  const auto start = std::chrono::steady_clock::now();
  auto alone = RunCommand(
      env + Train("--run-dir " + run + " --set dist.timeout_s=1 --set dist.join_timeout_s=4"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(alone.exit_code, 1);
  EXPECT_GE(seconds, 4.0);
  EXPECT_LT(seconds, 60.0);
  const std::string log = ReadAll(run + "/log.txt");
  EXPECT_NE(log.find("cannot join the process group at 127.0.0.1:" + std::to_string(*port) +
                     " within 4 s"),
            std::string::npos)
      << log << alone.err;
  EXPECT_TRUE(StepLines(run + "/metrics.jsonl").empty());
}

// SIGTERM to one rank preempts both at the same step; rank 0 writes the
// checkpoint. Resumed on 2 ranks the run repeats the uninterrupted one
// exactly; resumed on 1 rank it repeats it up to float summation order.
TEST_F(DistTrainTest, PreemptingOneRankStopsBothAndResumesExactly) {
  const std::string steps = "--set train.sft.steps=40";
  const std::string reference = dir_ / "reference";
  auto uninterrupted =
      RunLoom("launch --nproc 2 -- " + Train("--run-dir " + reference + " " + steps));
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.err;

  const std::string run = dir_ / "preempted";
  {
    Ranks ranks = StartRanks(run, steps);
    ASSERT_TRUE(WaitForSteps(run + "/metrics.jsonl", 5));
    ranks.rank1->Signal(SIGTERM);
    EXPECT_EQ(ranks.rank1->Wait(), 0) << ReadAll(run + ".rank1.log");
    EXPECT_EQ(ranks.rank0->Wait(), 0) << ReadAll(run + ".rank0.log");
  }
  EXPECT_NE(ReadAll(run + ".rank0.log").find("another rank was signalled"), std::string::npos);
  const size_t done = StepLines(run + "/metrics.jsonl").size();
  ASSERT_LT(done, 40u) << "the run finished before the signal";
  EXPECT_EQ(StepLines(run + "/metrics.rank1.jsonl").size(), done);
  ASSERT_TRUE(fs::exists(run + "/checkpoints/latest"));
  fs::copy(run, run + "-on-1", fs::copy_options::recursive);

  auto resumed =
      RunLoom("launch --nproc 2 -- " + Train("--run-dir " + run + " " + steps + " --resume auto"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto expected = StepLines(reference + "/metrics.jsonl");
  ExpectSameLosses(expected, StepLines(run + "/metrics.jsonl"), 1e-7);
  const auto ref_rank1 = StepLines(reference + "/metrics.rank1.jsonl");
  const auto got_rank1 = StepLines(run + "/metrics.rank1.jsonl");
  ASSERT_EQ(ref_rank1.size(), got_rank1.size());
  EXPECT_EQ(ref_rank1.back()["weights_checksum"], got_rank1.back()["weights_checksum"]);

  auto on_one = RunLoom(Train("--run-dir " + run + "-on-1 " + steps + " --resume auto"));
  ASSERT_EQ(on_one.exit_code, 0) << on_one.err;
  ExpectSameLosses(expected, StepLines(run + "-on-1/metrics.jsonl"), 1e-5);
}

// The launcher forwards SIGTERM to every rank: both checkpoint, all exit 0.
TEST_F(DistTrainTest, TheLauncherForwardsPreemption) {
  const std::string run = dir_ / "launched";
  LoomProcess launcher(
      {"launch", "--nproc", "2", "--", "train", "--config", kConfig, "--set",
       "model.path=" + model_, "--run-dir", run, "--set", "train.sft.steps=100000"},
      run + ".log");
  ASSERT_TRUE(WaitForSteps(run + "/metrics.jsonl", 3)) << ReadAll(run + ".log");
  launcher.Signal(SIGTERM);
  EXPECT_EQ(launcher.Wait(), 0) << ReadAll(run + ".log");
  const std::string log = ReadAll(run + ".log");
  EXPECT_NE(log.find("forwarding signal 15 to every rank"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(run + "/checkpoints/latest"));
}

// GRPO on 2 ranks (each its share of the prompt groups, the batch trained
// when both have theirs): from the same SFT weights, in sync dispatch with
// run.deterministic, the same samples, rewards and losses as 1 rank. In
// sample dispatch a 2-rank run preempted mid-GRPO resumes exactly — each
// rank's in-flight samples come back from its share of the checkpoint —
// and the checkpoint also resumes on 1 rank, without rank 1's samples.
TEST_F(DistTrainTest, GrpoOnTwoRanksTrainsLikeOneAndResumesExactly) {
  const std::string config = std::string(LOOM_SOURCE_DIR) + "/configs/test/dist-grpo.yaml";
  const std::string sft = dir_ / "sft";
  auto trained = RunLoom("train --config " + config + " --set model.path=" + model_ +
                         " --run-dir " + sft + " --set 'train.stages=[sft]'");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  // GRPO alone from the SFT weights (as words, for the launcher started below).
  std::vector<std::string> grpo = {
      "train", "--config",           config, "--set", "model.path=" + sft + "/stages/sft",
      "--set", "train.stages=[grpo]"};
  auto command = [](const std::vector<std::string>& words, const std::string& extra) {
    std::string line;
    for (const std::string& w : words) line += "'" + w + "' ";
    return line + extra;
  };

  const std::string one = dir_ / "grpo-one", two = dir_ / "grpo-two";
  const auto [reference, rank0, rank1] = TrainOnOneAndTwo(command(grpo, ""), one, two);
  ASSERT_EQ(reference.size(), 5u);
  ExpectSameLosses(reference, rank0, 1e-6);
  bool informative = false;
  for (size_t i = 0; i < reference.size() && i < rank0.size() && i < rank1.size(); ++i) {
    EXPECT_EQ(rank0[i]["samples"], 16);
    EXPECT_EQ(rank0[i]["rank_samples"], 8);
    EXPECT_EQ(rank0[i]["reward_mean"], reference[i]["reward_mean"]) << "step " << i + 1;
    EXPECT_EQ(rank0[i]["response_length_mean"], reference[i]["response_length_mean"]);
    EXPECT_EQ(rank0[i]["weights_checksum"], rank1[i]["weights_checksum"]) << "step " << i + 1;
    const double reward = reference[i]["reward_mean"].get<double>();
    informative = informative || (reward > 0 && reward < 1);
  }
  EXPECT_TRUE(informative) << "no step had rewards to learn from: the test shows nothing";

  // Sample dispatch: preempted after a few steps, then resumed.
  for (const char* set :
       {"async.dispatch=sample", "async.max_inflight=32", "train.grpo.steps=12"}) {
    grpo.insert(grpo.end(), {"--set", set});
  }
  const std::string uninterrupted = dir_ / "async-reference";
  auto reference_run =
      RunLoom("launch --nproc 2 -- " + command(grpo, "--run-dir " + uninterrupted));
  ASSERT_EQ(reference_run.exit_code, 0) << reference_run.err;
  const std::string run = dir_ / "async-preempted";
  {
    std::vector<std::string> args = {"launch", "--nproc", "2", "--"};
    args.insert(args.end(), grpo.begin(), grpo.end());
    args.insert(args.end(), {"--run-dir", run});
    LoomProcess launcher(args, run + ".log");
    ASSERT_TRUE(WaitForSteps(run + "/metrics.jsonl", 4)) << ReadAll(run + ".log");
    launcher.Signal(SIGTERM);
    ASSERT_EQ(launcher.Wait(), 0) << ReadAll(run + ".log");
  }
  ASSERT_LT(StepLines(run + "/metrics.jsonl").size(), 12u) << "finished before the signal";
  std::string latest = ReadAll(run + "/checkpoints/latest");
  while (!latest.empty() && latest.back() == '\n') latest.pop_back();
  EXPECT_TRUE(fs::exists(run + "/checkpoints/" + latest + "/ranks/rank1/state.json")) << latest;
  fs::copy(run, run + "-on-1", fs::copy_options::recursive);
  auto resumed =
      RunLoom("launch --nproc 2 -- " + command(grpo, "--run-dir " + run + " --resume auto"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto expected = StepLines(uninterrupted + "/metrics.jsonl");
  const auto got = StepLines(run + "/metrics.jsonl");
  ExpectSameLosses(expected, got, 1e-7);
  for (size_t i = 0; i < expected.size() && i < got.size(); ++i) {
    EXPECT_EQ(expected[i]["reward_mean"], got[i]["reward_mean"]) << "step " << i + 1;
    EXPECT_EQ(expected[i]["decode_tokens"], got[i]["decode_tokens"]) << "step " << i + 1;
  }
  EXPECT_NE(ReadAll(run + "/log.rank1.txt").find("in-flight samples restored"), std::string::npos);

  // On 1 rank: rank 0 takes over rank 1's samples, and trains every sample
  // either rank had in the checkpoint, each once, under ids never given twice.
  const std::string on_one_dir = run + "-on-1";
  auto on_one = RunLoom(command(grpo, "--run-dir " + on_one_dir + " --resume auto"));
  ASSERT_EQ(on_one.exit_code, 0) << on_one.err;
  EXPECT_EQ(StepLines(on_one_dir + "/metrics.jsonl").back()["step"], 12);
  EXPECT_NE(ReadAll(on_one_dir + "/log.txt").find("rank 0 takes over rank 1's"), std::string::npos);
  const std::string checkpoint = on_one_dir + "/checkpoints/" + latest;
  std::set<uint64_t> saved;  // every sample in the checkpoint, either rank's
  for (const std::string& share : {checkpoint, checkpoint + "/ranks/rank1"}) {
    auto state = nlohmann::json::parse(ReadAll(share + "/state.json"));
    for (const auto& record : state["grpo"]["records"]) saved.insert(record["id"].get<uint64_t>());
  }
  ASSERT_FALSE(saved.empty());
  nlohmann::json resume;
  for (const auto& line : JsonLines(on_one_dir + "/metrics.jsonl")) {
    if (line.value("event", "") == "resume") resume = line;
  }
  ASSERT_TRUE(resume.is_object());
  EXPECT_EQ(resume["ranks_written"], 2);
  EXPECT_EQ(resume["ranks_taken_over"], nlohmann::json::array({1}));
  EXPECT_EQ(resume["inflight_restored"].get<size_t>() + resume["finished_restored"].get<size_t>(),
            saved.size());
  const int64_t resumed_at = resume["step"].get<int64_t>();
  std::map<uint64_t, int> times_trained;  // per sample id, over the whole run
  for (const char* file : {"/samples.jsonl", "/samples.rank1.jsonl"}) {
    for (const auto& line : JsonLines(on_one_dir + file)) {
      ++times_trained[line["id"].get<uint64_t>()];
      if (line["step"].get<int64_t>() > resumed_at) saved.erase(line["id"].get<uint64_t>());
    }
  }
  EXPECT_TRUE(saved.empty()) << saved.size() << " samples of the checkpoint were never trained";
  for (const auto& [id, times] : times_trained) EXPECT_EQ(times, 1) << "sample " << id;
}

// A difficulty filter that retires every task on its first verdict, on 2
// ranks: every rank records every rank's verdicts, so both find nothing left
// to draw and end the stage together, cleanly, long before its steps.
TEST_F(DistTrainTest, EveryTaskRetiredEndsTheStageOnBothRanksTogether) {
  std::istringstream lines(ReadAll(LOOM_SOURCE_DIR "/configs/tasks/filter-train.jsonl"));
  std::string ten;
  std::string line;
  for (int i = 0; i < 10 && std::getline(lines, line); ++i) ten += line + "\n";
  const std::string file = dir_.Write("ten.jsonl", ten);
  const std::string run = dir_ / "all-retired";
  std::string train = "launch --nproc 2 -- train --config " + std::string(LOOM_SOURCE_DIR) +
                      "/configs/test/dist-grpo.yaml --set model.path=" + model_ + " --run-dir " +
                      run;
  for (const std::string& set : std::vector<std::string>{
           "train.stages=[grpo]", "train.grpo.steps=20", "tasks.datasets.arithmetic.kind=jsonl",
           "tasks.datasets.arithmetic.path=" + file, "tasks.datasets.arithmetic.eval_path=" + file,
           "tasks.datasets.arithmetic.filter.min_pass=0.5",
           "tasks.datasets.arithmetic.filter.max_pass=0.5",
           "tasks.datasets.arithmetic.filter.after_attempts=1"}) {
    train += " --set '" + set + "'";
  }
  auto launched = RunLoom(train);
  ASSERT_EQ(launched.exit_code, 0) << launched.err << ReadAll(run + "/log.rank1.txt");
  for (const char* log : {"/log.txt", "/log.rank1.txt"}) {
    EXPECT_NE(ReadAll(run + log).find("every task left to draw is retired"), std::string::npos)
        << log;
  }
  const auto rank0 = StepLines(run + "/metrics.jsonl");
  EXPECT_FALSE(rank0.empty());
  EXPECT_LT(rank0.size(), 20u);
  EXPECT_EQ(rank0.size(), StepLines(run + "/metrics.rank1.jsonl").size());
  EXPECT_EQ(EvalLines(run + "/metrics.jsonl").size(), 1u);
}

// OPD on 2 ranks from two teachers of other architectures: in sync dispatch
// with run.deterministic, the same per-step loss and KL as 1 rank.
TEST_F(DistTrainTest, OpdOnTwoRanksDistilsLikeOne) {
  std::string teachers;
  for (const char* arch : {"qwen3", "llama"}) {
    const std::string path = dir_ / (std::string("teacher-") + arch);
    auto made = RunLoom(std::string("init-model --arch ") + arch + " --out " + path +
                        " --seed 11 --set hidden_size=64 --set num_hidden_layers=2");
    ASSERT_EQ(made.exit_code, 0) << made.err;
    teachers += std::string("    - {name: ") + arch + ", path: " + path + "}\n";
  }
  const std::string config = dir_.Write(
      "opd.yaml", "base: " + std::string(LOOM_SOURCE_DIR) + "/configs/test/dist-grpo.yaml\n" + R"(
tasks:
  eval_every: 0
  datasets:
    - {name: arithmetic, kind: arithmetic, min_difficulty: 1, max_difficulty: 1, eval_size: 4,
       teacher: qwen3}
    - {name: sort, kind: sort, min_difficulty: 1, max_difficulty: 2, eval_size: 4, teacher: llama}
opd:
  eval_teachers: false
  teachers:
)" + teachers + R"(
train:
  stages: [opd]
  opd: {steps: 4, lr: 1.0e-3}
)");
  const std::string one = dir_ / "opd-one", two = dir_ / "opd-two";
  const auto [reference, rank0, rank1] =
      TrainOnOneAndTwo("train --config " + config + " --set model.path=" + model_, one, two);
  ASSERT_EQ(reference.size(), 4u);
  ExpectSameLosses(reference, rank0, 1e-6);
  for (size_t i = 0; i < reference.size() && i < rank0.size() && i < rank1.size(); ++i) {
    EXPECT_GT(reference[i]["kl"].get<double>(), 0);
    EXPECT_NEAR(rank0[i]["kl"].get<double>(), reference[i]["kl"].get<double>(), 1e-6);
    EXPECT_EQ(rank0[i]["samples"], 16);
    EXPECT_EQ(rank0[i]["rank_samples"], 8);
    EXPECT_EQ(rank0[i]["weights_checksum"], rank1[i]["weights_checksum"]) << "step " << i + 1;
  }
}

// What cannot run is refused before any work, with the reason.
TEST_F(DistTrainTest, BadLaunchesAreClearErrors) {
  // A rank outside the world.
  auto outside = RunCommand("RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 " +
                            std::string(LOOM_BINARY) + " " + Train("--run-dir " + dir_ / "bad"));
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_NE(outside.err.find("RANK=2 is outside [0, WORLD_SIZE=2)"), std::string::npos)
      << outside.err;
  // A teacher still to be made from its companion config.
  const std::string grpo = dir_ / "grpo";
  auto stages = RunLoom("launch --nproc 2 -- train --config " + std::string(LOOM_SOURCE_DIR) +
                        "/configs/opd.yaml --run-dir " + grpo + " --set model.path=" + model_);
  EXPECT_EQ(stages.exit_code, 1);
  EXPECT_NE(ReadAll(grpo + "/log.txt").find("yet; make it before a multi-rank run: loom train"),
            std::string::npos)
      << stages.err;
  EXPECT_FALSE(fs::exists(grpo + "/metrics.jsonl") && !StepLines(grpo + "/metrics.jsonl").empty());
  // A global batch that does not split evenly between the ranks.
  const std::string odd = dir_ / "odd";
  auto uneven = RunLoom("launch --nproc 2 -- train --config " + std::string(LOOM_SOURCE_DIR) +
                        "/configs/test/dist-grpo.yaml --set model.path=" + model_ + " --run-dir " +
                        odd + " --set train.sft.steps=1 --set async.max_inflight=15");
  EXPECT_EQ(uneven.exit_code, 1);
  EXPECT_NE(ReadAll(odd + "/log.txt").find("async.max_inflight (15) does not divide among 2 ranks"),
            std::string::npos)
      << uneven.err;
  // Every rank fails on a bad config: the launcher passes the status on.
  auto config = RunLoom("launch --nproc 2 -- train --config " + dir_ / "missing.yaml");
  EXPECT_EQ(config.exit_code, 2);
  // Nothing to launch.
  EXPECT_EQ(RunLoom("launch --nproc 2").exit_code, 2);
  EXPECT_EQ(RunLoom("launch --nproc 0 -- version").exit_code, 2);
}

}  // namespace
}  // namespace loom
