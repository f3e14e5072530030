// Live reconfiguration through the real binaries: `loom train` runs an OPD
// stage (configs/test/live.yaml) while `loom ctl` pauses it, switches a
// dataset's teacher, lowers a dataset's cap, parks a dataset and sends
// changes that must be refused; then the paused run is preempted and resumed. Every trained
// sample's line in samples.jsonl is checked against the version it was
// dispatched under.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "loom/metrics/metrics_writer.h"
#include "testing/loom_process.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::TempDir;

// OPD training steps in metrics.jsonl so far (a partly written line is not counted).
int OpdSteps(const std::string& run_dir) {
  std::istringstream lines(testing::ReadAll(run_dir + "/metrics.jsonl"));
  int count = 0;
  for (std::string line; std::getline(lines, line);) {
    auto r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (r.is_object() && r.value("stage", "") == "opd" && r.contains("kl")) ++count;
  }
  return count;
}

// Waits until `steps` OPD steps are logged; false if the run ended first.
bool WaitForOpdSteps(testing::LoomProcess& process, const std::string& run_dir, int steps) {
  while (process.Running()) {
    if (OpdSteps(run_dir) >= steps) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

testing::CommandResult Ctl(const std::string& run_dir, const std::string& args) {
  return testing::RunLoom("ctl " + run_dir + " " + args);
}

std::vector<nlohmann::json> Read(const std::string& path) {
  auto lines = metrics::ReadMetrics(path);
  EXPECT_TRUE(lines.ok()) << lines.status();
  return lines.ok() ? *lines : std::vector<nlohmann::json>{};
}

class LiveChangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* arch : {"qwen3", "llama"}) {
      const std::string path = dir_ / (std::string("teacher-") + arch);
      auto made = testing::RunLoom(std::string("init-model --arch ") + arch + " --out " + path +
                                   " --seed 11 --set hidden_size=64 --set num_hidden_layers=2");
      ASSERT_EQ(made.exit_code, 0) << made.err;
      teachers_ +=
          std::string(teachers_.empty() ? "" : ", ") + "{name: " + arch + ", path: " + path + "}";
    }
  }

  std::vector<std::string> TrainArgs(bool resume) const {
    std::vector<std::string> args = {"train",
                                     "--config",
                                     LOOM_SOURCE_DIR "/configs/test/live.yaml",
                                     "--run-dir",
                                     run_dir_,
                                     "--set",
                                     "model.path=" + dir_ / "model",
                                     "--set",
                                     "opd.teachers=[" + teachers_ + "]"};
    if (resume) args.insert(args.end(), {"--resume", "auto"});
    return args;
  }

  TempDir dir_;
  std::string teachers_;
  const std::string run_dir_ = dir_ / "run";
};

TEST_F(LiveChangeTest, TeacherCapAndActiveChangeMidRunAndSurvivePreemption) {
  const std::string log = run_dir_ + ".out";
  EXPECT_EQ(Ctl(run_dir_, "set tasks.eval_every=1").exit_code, 1) << "no trainer yet";
  testing::LoomProcess train(TrainArgs(false), log);
  ASSERT_TRUE(WaitForOpdSteps(train, run_dir_, 2)) << testing::ReadAll(log);

  // Held still while the changes below go in, however fast the steps are.
  auto paused = Ctl(run_dir_, "pause --reason 'change teachers'");
  ASSERT_EQ(paused.exit_code, 0) << paused.err << testing::ReadAll(log);
  EXPECT_NE(paused.out.find("paused at config version 0"), std::string::npos) << paused.out;
  const int steps_at_pause = OpdSteps(run_dir_);

  // v1: sort's samples go to the Qwen3 teacher from now on.
  auto switched = Ctl(run_dir_, "set tasks.datasets.sort.teacher=qwen3 --reason 'try qwen3'");
  ASSERT_EQ(switched.exit_code, 0) << switched.err << testing::ReadAll(log);
  EXPECT_NE(switched.out.find("config version 1:"), std::string::npos) << switched.out;
  EXPECT_NE(switched.out.find("tasks.datasets.sort.teacher: llama -> qwen3"), std::string::npos);

  // Refused, each naming its key; the run goes on at version 1.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"set model.path=/elsewhere", "model.path: not live-changeable"},
      {"set tasks.datasets.sort.weight=-1",
       "tasks.datasets[1].weight: out of range: expected a value >= 0, got -1"},
      {"set tasks.datasets[5].weight=1", "tasks.datasets: no entry '5'"},
      {"set tasks.datasets.arithmetic.max_inflight=3",
       "tasks.datasets.arithmetic.max_inflight: expected 0 (no cap) or at least 5"},
      {"set '+opd.teachers={name: ghost, path: " + dir_ / "missing" + "}'",
       "opd.teachers.ghost.path: teacher 'ghost'"},
  };
  for (const auto& [args, error] : refused) {
    auto result = Ctl(run_dir_, args);
    EXPECT_EQ(result.exit_code, 2) << args << "\n" << result.err;
    EXPECT_NE(result.err.find(error), std::string::npos) << args << "\n" << result.err;
    EXPECT_NE(result.err.find("the run goes on at config version 1"), std::string::npos)
        << result.err;
  }
  // Request files that are not well-formed get an answer too.
  const std::vector<std::pair<std::string, std::string>> malformed = {
      {"{not json", "request 0-bad: not a JSON object"},
      {R"({"pause": "yes"})", "request 0-bad: pause: expected true or false"},
      {R"({"set": ["tasks.eval_every=1"], "pause": true})",
       "request 0-bad: expected either set (a list of KEY=VALUE strings) or pause"},
  };
  for (const auto& [body, error] : malformed) {
    const std::string reply_path = run_dir_ + "/ctl/replies/0-bad.json";
    std::filesystem::remove(reply_path);
    { std::ofstream(run_dir_ + "/ctl/requests/0-bad.json") << body; }
    for (int i = 0; i < 500 && !std::filesystem::exists(reply_path); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::string reply = testing::ReadAll(reply_path);
    EXPECT_NE(reply.find(error), std::string::npos) << body << "\n" << reply;
  }

  auto shown = Ctl(run_dir_, "show");
  EXPECT_NE(shown.out.find("config version 1 (trainer running, pid"), std::string::npos)
      << shown.out;
  EXPECT_NE(shown.out.find(", paused)"), std::string::npos) << shown.out;
  EXPECT_EQ(OpdSteps(run_dir_), steps_at_pause) << "no step while paused";
  auto unpaused = Ctl(run_dir_, "unpause");
  ASSERT_EQ(unpaused.exit_code, 0) << unpaused.err;
  EXPECT_NE(unpaused.out.find("running at config version 1"), std::string::npos) << unpaused.out;

  // v2: arithmetic capped at one prompt's group (5 samples).
  ASSERT_TRUE(WaitForOpdSteps(train, run_dir_, OpdSteps(run_dir_) + 2)) << testing::ReadAll(log);
  auto cap = Ctl(run_dir_, "set tasks.datasets.0.max_inflight=5");
  ASSERT_EQ(cap.exit_code, 0) << cap.err;
  // v3: arithmetic parked.
  ASSERT_TRUE(WaitForOpdSteps(train, run_dir_, OpdSteps(run_dir_) + 3)) << testing::ReadAll(log);
  auto parked = Ctl(run_dir_, "set tasks.datasets.arithmetic.active=false");
  ASSERT_EQ(parked.exit_code, 0) << parked.err;
  ASSERT_TRUE(WaitForOpdSteps(train, run_dir_, OpdSteps(run_dir_) + 2)) << testing::ReadAll(log);
  // A paused run still checkpoints and stops on a signal.
  ASSERT_EQ(Ctl(run_dir_, "pause").exit_code, 0);
  train.Signal(SIGTERM);
  ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(log);

  auto show = Ctl(run_dir_, "show --json");
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const nlohmann::json live = nlohmann::json::parse(show.out);
  EXPECT_EQ(live["current"]["config_version"], 3);
  EXPECT_FALSE(live["current"]["running"].get<bool>());
  EXPECT_FALSE(live["current"]["paused"].get<bool>());
  std::vector<nlohmann::json> changes;
  std::vector<std::string> pauses;
  for (const auto& entry : live["history"]) {
    if (entry.contains("event")) {
      pauses.push_back(entry["event"].get<std::string>() + " " + entry.value("reason", ""));
    } else {
      changes.push_back(entry);
    }
  }
  EXPECT_EQ(pauses, (std::vector<std::string>{"paused change teachers", "unpaused ", "paused "}));
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0]["reason"], "try qwen3");
  EXPECT_GE(changes[0]["apply_seconds"].get<double>(), 0.0);
  EXPECT_EQ(changes[1]["changes"][0]["key"], "tasks.datasets.arithmetic.max_inflight");

  testing::LoomProcess resumed(TrainArgs(true), log);
  ASSERT_EQ(resumed.Wait(), 0) << testing::ReadAll(log);
  EXPECT_NE(testing::ReadAll(log).find("live config: resuming at version 3"), std::string::npos);

  // Every OPD sample: its teacher and dataset follow the version it was
  // dispatched under, before and after the resume.
  std::map<int64_t, std::set<int64_t>> versions_by_step;  // from samples.jsonl
  std::map<int64_t, int> sort_by_version;
  int parked_dispatches = 0;
  for (const auto& s : Read(run_dir_ + "/samples.jsonl")) {
    if (s["stage"] != "opd") continue;
    const int64_t version = s["config_version"];
    versions_by_step[s["step"]].insert(version);
    if (s["dataset"] == "sort") {
      EXPECT_EQ(s["teacher"], version == 0 ? "llama" : "qwen3") << s;
      ++sort_by_version[version == 0 ? 0 : 1];
    } else {
      EXPECT_EQ(s["teacher"], "qwen3") << s;
      if (version >= 3) ++parked_dispatches;
    }
  }
  EXPECT_GT(sort_by_version[0], 0);
  EXPECT_GT(sort_by_version[1], 0);
  EXPECT_EQ(parked_dispatches, 0) << "arithmetic dispatched after it was set inactive";

  // metrics.jsonl: config_version on every line; each step's batch versions
  // match its samples; the cap drains; parked arithmetic's in-flight samples
  // still train.
  const std::vector<nlohmann::json> metrics = Read(run_dir_ + "/metrics.jsonl");
  int64_t version = 0, opd_steps = 0, arithmetic_inflight_at_park = -1;
  int64_t last_arith = -1;
  bool capped = false, under_cap = false;
  std::map<int64_t, int64_t> arithmetic_trained_after;  // step -> samples
  int64_t park_step = -1;
  for (const auto& r : metrics) {
    if (r.value("event", "") == "config_change") {
      version = r["config_version"];
      if (version == 2) last_arith = -1;  // dispatches before the change may have raised it
      capped = version >= 2;
      if (version == 3) park_step = opd_steps + 1;
      continue;
    }
    if (r.value("stage", "") != "opd" || !r.contains("kl")) continue;
    ++opd_steps;
    EXPECT_EQ(r["config_version"], version) << r;
    const auto batch = r["batch_config_versions"].get<std::set<int64_t>>();
    EXPECT_EQ(batch, versions_by_step[r["step"].get<int64_t>()]) << r;
    const int64_t arith = r["inflight_by_dataset"]["arithmetic"];
    if (capped && !under_cap) {
      if (last_arith >= 0) {
        EXPECT_LE(arith, last_arith) << "drains toward its cap: " << r;
      }
      under_cap = arith <= 5;
    } else if (under_cap) {
      EXPECT_LE(arith, 5) << r;
    }
    if (park_step < 0) arithmetic_inflight_at_park = arith;
    last_arith = arith;
  }
  EXPECT_EQ(opd_steps, 150);
  EXPECT_EQ(version, 3) << "the resumed run went on under version 3";
  ASSERT_GT(park_step, 0);
  int arithmetic_after_park = 0;
  for (const auto& s : Read(run_dir_ + "/samples.jsonl")) {
    if (s["stage"] == "opd" && s["dataset"] == "arithmetic" && s["step"] >= park_step) {
      ++arithmetic_after_park;
    }
  }
  EXPECT_GE(arithmetic_after_park, arithmetic_inflight_at_park)
      << "samples in flight when arithmetic was parked still train";

  // The same run seen through TensorBoard (two event files: before and after
  // the resume), read by an independent reader: every number of every line.
  auto tensorboard = testing::RunCommand(
      "/usr/bin/python3 " LOOM_SOURCE_DIR "/tests/metrics/read_tfevents.py --compare " + run_dir_);
  EXPECT_EQ(tensorboard.exit_code, 0) << tensorboard.out << tensorboard.err;
  // And as a report.
  auto report = testing::RunLoom("report " + run_dir_);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  for (const char* plot : {"accuracy", "inflight", "time", "kl", "loss"}) {
    const std::string png = run_dir_ + "/report/" + plot + ".png";
    EXPECT_NE(report.out.find(png), std::string::npos) << report.out;
    EXPECT_GT(std::filesystem::exists(png) ? std::filesystem::file_size(png) : 0, 1000u) << png;
  }
}

}  // namespace
}  // namespace loom
