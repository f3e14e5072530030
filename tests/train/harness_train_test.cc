// GRPO through an external harness end to end: the real `loom train` binary,
// a tiny model, 2 real local workers, bubblewrap sandboxes, and Pi from npm
// as each episode's main process, its model calls served by loom's endpoint
// over the worker's relay (configs/test/harnesses.yaml). The same task file
// runs as three datasets, under the built-in loop, under Pi and under a
// harness given as a command (a probe that calls the endpoint once); its
// verification passes at random, so groups carry a gradient whatever the
// untrained model writes. What the run leaves is checked for the harness
// contract: every generated token of a Pi session trains in exactly one of
// its sequences, with the episode's one reward, and every group runs under
// one harness.

#include <gtest/gtest.h>

#include <signal.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "loom/metrics/metrics_writer.h"
#include "testing/harness_probe.h"
#include "testing/json_lines.h"
#include "testing/loom_process.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::TempDir;
using Json = nlohmann::json;

// Two tasks whose verification passes half the time.
std::string TaskFile(const TempDir& dir) {
  std::string lines;
  for (const char* id : {"coin-a", "coin-b"}) {
    const Json task = {{"id", id},
                       {"problem", std::string("Write hello.txt (task ") + id + ")."},
                       {"environment", {{"files", {{"probe.py", testing::kHarnessProbe}}}}},
                       {"verification", {{"command", "test $((RANDOM % 2)) = 0"}}}};
    lines += task.dump() + "\n";
  }
  return dir.Write("tasks.jsonl", lines);
}

// `loom train` on the harness test config and `dir`'s task file.
std::vector<std::string> TrainArgs(const TempDir& dir, const std::string& tasks, int steps,
                                   bool resume = false,
                                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"train",
                                   "--config",
                                   LOOM_SOURCE_DIR "/configs/test/harnesses.yaml",
                                   "--run-dir",
                                   dir / "run",
                                   "--set",
                                   "model.path=" + (dir / "model"),
                                   "--set",
                                   "tasks.datasets[0].path=" + tasks,
                                   "--set",
                                   "tasks.datasets[1].path=" + tasks,
                                   "--set",
                                   "tasks.datasets[2].path=" + tasks,
                                   "--set",
                                   "sandbox.harness_dir=" LOOM_SOURCE_DIR "/third_party/npm",
                                   "--set",
                                   "train.grpo.steps=" + std::to_string(steps)};
  if (resume) args.insert(args.end(), {"--resume", "auto"});
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

bool PiInstalled() {
  return std::filesystem::exists(LOOM_SOURCE_DIR "/third_party/npm/node_modules/.bin/pi");
}

TEST(HarnessTrainTest, GrpoTrainsThroughHarnessesAndTheBuiltinLoopSideBySide) {
  if (!PiInstalled()) GTEST_SKIP() << "Pi is not installed: run scripts/setup.sh";
  TempDir dir;
  const std::string tasks = TaskFile(dir);
  const std::string run_dir = dir / "run";
  testing::LoomProcess train(TrainArgs(dir, tasks, 4), dir / "train.out");
  ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(dir / "train.out");

  // Pi's sessions: each generated token is in exactly one sequence, and
  // the sequences hold every token the session's calls generated.
  std::map<int64_t, Json> pi_episodes;  // by sample id
  int probes = 0;
  for (const Json& line : testing::ReadJsonLines(run_dir + "/trajectories.jsonl")) {
    const Json& t = line["trajectory"];
    if (line["dataset"] == "builtin") {
      EXPECT_FALSE(line.contains("sequences")) << line.dump();
      continue;
    }
    if (line["dataset"] == "probe") {  // one call, one sequence, its tokens capped
      ++probes;
      EXPECT_EQ(t["harness"], "probe");
      EXPECT_EQ(t["exit_code"], 0) << t.dump();
      ASSERT_EQ(t["calls"].size(), 1u) << t.dump();
      EXPECT_EQ(line["sequences"].size(), 1u);
      EXPECT_LE(t["calls"][0]["completion_tokens"].get<int>(), 8);  // its harness_env's
      continue;
    }
    EXPECT_EQ(t["harness"], "pi");
    EXPECT_FALSE(line["harness_version"].get<std::string>().empty()) << "from its package.json";
    EXPECT_EQ(t["infrastructure"], false) << t.dump();
    EXPECT_GE(t["calls"].size(), 1u) << t.dump();  // Pi asks the model at least once
    int64_t generated = 0, called = 0;
    for (const Json& call : t["calls"]) called += call["completion_tokens"].get<int64_t>();
    for (const Json& sequence : line["sequences"]) {
      const std::vector<int> mask = sequence["loss_mask"];
      EXPECT_EQ(mask.size(), sequence["tokens"].size());
      const int64_t prompt = sequence["prompt_length"];
      for (size_t i = 0; i < mask.size(); ++i) {
        generated += mask[i];
        if (static_cast<int64_t>(i) < prompt) {
          EXPECT_EQ(mask[i], 0) << "prompt token " << i;
        }
      }
    }
    EXPECT_EQ(generated, called) << t.dump();
    EXPECT_EQ(line["sequences"].size(), t["segments"]) << t.dump();
    EXPECT_EQ(t["reward"].get<double>() == 1.0, t["passed"].get<bool>()) << t.dump();
    pi_episodes[line["sample"].get<int64_t>()] = line;
  }
  ASSERT_GE(pi_episodes.size(), 2u);
  EXPECT_GE(probes, 2);

  // Trained samples: one line per episode, a group never mixes harnesses,
  // and a Pi episode trains all of its generated tokens.
  std::map<std::pair<int, int64_t>, std::set<std::string>> harnesses_of_group;
  int trained_pi = 0;
  for (const Json& line : testing::ReadJsonLines(run_dir + "/samples.jsonl")) {
    const std::string harness = line.value("harness", "builtin");
    EXPECT_EQ(harness, line["dataset"]) << line.dump();  // the datasets are named after them
    harnesses_of_group[{line["step"], line["subgroup"]}].insert(harness);
    if (harness != "pi") continue;
    ++trained_pi;
    const auto episode = pi_episodes.find(line["id"].get<int64_t>());
    ASSERT_NE(episode, pi_episodes.end()) << line.dump();
    EXPECT_EQ(line["sequences"], episode->second["sequences"].size());
    int64_t generated = 0;
    for (const Json& call : episode->second["trajectory"]["calls"]) {
      generated += call["completion_tokens"].get<int64_t>();
    }
    EXPECT_EQ(line["generated_tokens"], generated) << line.dump();
    EXPECT_EQ(line["episode"]["reward"], episode->second["trajectory"]["reward"]);
  }
  EXPECT_GE(trained_pi, 2);
  for (const auto& [group, harnesses] : harnesses_of_group) {
    EXPECT_EQ(harnesses.size(), 1u) << "step " << group.first << " subgroup " << group.second;
  }

  // Every step line splits the reward by harness, and the trained tokens
  // include the Pi sequences' (checked over the run: each step trains what
  // its informative groups hold).
  auto metrics = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  int steps = 0;
  std::set<std::string> seen;
  for (const Json& r : *metrics) {
    if (!r.contains("loss")) continue;
    ++steps;
    EXPECT_EQ(r["episodes_masked"], 0) << r.dump();
    for (const auto& [harness, reward] : r["reward_by_harness"].items()) seen.insert(harness);
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(seen, (std::set<std::string>{"builtin", "pi", "probe"}));
}

// Held-out tasks of every dataset, evaluated during training under the
// dataset's own scaffold (the built-in loop, Pi, the probe command) at every
// tasks.eval_every step. The verdicts are fixed by construction (one task
// always passes, one never does, one's setup fails), so each row is checked
// against a count by hand whatever the model writes; the held-out episodes
// never train.
TEST(HarnessTrainTest, HeldOutTasksAreEvaluatedUnderEachDatasetsHarnessDuringTraining) {
  if (!PiInstalled()) GTEST_SKIP() << "Pi is not installed: run scripts/setup.sh";
  TempDir dir;
  const std::string tasks = TaskFile(dir);
  std::string lines;
  for (const auto& [id, verification, setup] :
       {std::tuple<const char*, const char*, const char*>{"always", "true", ""},
        {"never", "false", ""},
        {"broken", "true", "exit 4"}}) {
    Json task = {{"id", id},
                 {"problem", "Write hello.txt."},
                 {"environment", {{"files", {{"probe.py", testing::kHarnessProbe}}}}},
                 {"verification", {{"command", verification}}}};
    if (*setup != '\0') task["environment"]["setup"] = setup;
    lines += task.dump() + "\n";
  }
  const std::string held_out = dir.Write("held-out.jsonl", lines);
  std::vector<std::string> extra = {"--set", "tasks.eval_every=1"};
  for (int d = 0; d < 3; ++d) {
    extra.insert(extra.end(),
                 {"--set", "tasks.datasets[" + std::to_string(d) + "].eval_path=" + held_out});
  }
  testing::LoomProcess train(TrainArgs(dir, tasks, 2, false, extra), dir / "train.out");
  ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(dir / "train.out");

  auto metrics = metrics::ReadMetrics(dir / "run/metrics.jsonl");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  std::vector<int> evaluated_at;
  for (const Json& r : *metrics) {
    if (!r.contains("eval_agent_results")) continue;
    evaluated_at.push_back(r["step"]);
    const Json& rows = r["eval_agent_results"];
    ASSERT_EQ(rows.size(), 3u) << rows.dump(1);
    for (const Json& row : rows) {
      // configs/test/harnesses.yaml names each dataset after its harness.
      EXPECT_EQ(row["scaffold"], row["dataset"]) << row.dump();
      EXPECT_EQ(row["tasks"], 3) << row.dump();
      EXPECT_EQ(row["episodes"], 3) << row.dump();
      EXPECT_EQ(row["failures_by_cause"], Json({{"setup_failed", 1}})) << row.dump();
      EXPECT_DOUBLE_EQ(row["pass@1"].get<double>(), 0.5) << row.dump();
      EXPECT_DOUBLE_EQ(row["pass@K"].get<double>(), 0.5) << row.dump();
      if (row["scaffold"] != "builtin") {
        EXPECT_GE(row["mean_turns"].get<double>(), 1.0) << row.dump();  // each calls the model
      }
      if (row["scaffold"] == "probe") {
        EXPECT_EQ(row["mean_turns"], 1.0) << row.dump();
      }
    }
    EXPECT_EQ(r["eval_agent_pass@1_by_dataset"],
              Json({{"builtin", 0.5}, {"pi", 0.5}, {"probe", 0.5}}));
  }
  EXPECT_EQ(evaluated_at, (std::vector<int>{1, 2}));
  // The held-out episodes are in the run's task ledger under their harness:
  // per dataset, two evaluations of two counted tasks and one failed setup.
  const auto stats = testing::RunLoom("tasks stats --json " + (dir / "run"));
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  const Json ledger = Json::parse(stats.out.substr(stats.out.rfind("\n{") + 1));
  ASSERT_EQ(ledger["datasets"].size(), 3u);
  for (const Json& d : ledger["datasets"]) {
    EXPECT_EQ(d["by_split"]["eval"],
              Json({{"attempts", 4}, {"pass_rate", 0.5}, {"infrastructure", 2}}))
        << d.dump();
    EXPECT_EQ(d["by_harness"].size(), 1u) << d.dump();
    EXPECT_TRUE(d["by_harness"].contains(d["dataset"].get<std::string>())) << d.dump();
  }
  for (const Json& line : testing::ReadJsonLines(dir / "run/trajectories.jsonl")) {
    const std::string id = line["trajectory"].value("task_id", "");
    EXPECT_TRUE(id == "coin-a" || id == "coin-b") << line["trajectory"].dump();
  }
}

// SIGTERM while Pi episodes run: the checkpoint holds the finished Pi
// episodes with every sequence, the running ones start again after
// `--resume` (counted), and every step and every episode trains once.
TEST(HarnessTrainTest, PreemptedWithPiEpisodesInFlightResumesAndTrainsEachOnce) {
  if (!PiInstalled()) GTEST_SKIP() << "Pi is not installed: run scripts/setup.sh";
  TempDir dir;
  const std::string tasks = TaskFile(dir);
  const std::string run_dir = dir / "run";
  constexpr int kSteps = 4;
  // Batches of 8 with 4 samples in flight: a finished episode waits for
  // its batch while others run, so the checkpoint finds it untrained.
  const std::vector<std::string> batch_of_8 = {"--set", "async.batch_samples=8"};
  // Preempt (resuming each time) once a Pi episode more has ended, until
  // the checkpoint holds a finished Pi episode of several sequences (a Pi
  // sample can also be trained, or dropped as stale, before the signal).
  auto pi_ended = [&] {
    int n = 0;
    for (const Json& line : testing::ReadJsonLines(run_dir + "/trajectories.jsonl"))
      n += line["dataset"] == "pi";
    return n;
  };
  auto several = [&](uint64_t id) {
    for (const Json& line : testing::ReadJsonLines(run_dir + "/trajectories.jsonl")) {
      if (line["sample"].get<uint64_t>() == id) return line["sequences"].size() > 1;
    }
    return false;
  };
  Json state, samples;
  std::map<uint64_t, size_t> sequences;  // finished episodes' further sequences, by sample
  std::set<uint64_t> finished;
  int running = 0, attempts = 0;
  bool held = false;
  for (; !held && attempts < 5; ++attempts) {
    const int before = pi_ended();
    testing::LoomProcess train(TrainArgs(dir, tasks, kSteps, attempts > 0, batch_of_8),
                               dir / "train.out");
    // Once a Pi episode ended, others are running: the dispatcher keeps
    // async.max_inflight samples going.
    for (int i = 0; i < 600 && train.Running() && pi_ended() == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(train.Running()) << testing::ReadAll(dir / "train.out");
    train.Signal(SIGTERM);
    ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(dir / "train.out");
    std::string latest = testing::ReadAll(run_dir + "/checkpoints/latest");
    while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back()))) {
      latest.pop_back();
    }
    const std::string checkpoint = run_dir + "/checkpoints/" + latest;
    state = Json::parse(testing::ReadAll(checkpoint + "/state.json"));
    samples = Json::parse(testing::ReadAll(checkpoint + "/samples.json"));
    sequences.clear();
    finished.clear();
    running = 0;
    for (const Json& s : samples["sequences"]) ++sequences[s["id"].get<uint64_t>()];
    for (const Json& r : state["grpo"]["records"]) {
      const uint64_t id = r["id"].get<uint64_t>();
      if (!r.contains("outcome")) {
        ++running;
        continue;
      }
      finished.insert(id);
      held |= r["dataset"] == 1 && several(id);  // configs/test/harnesses.yaml: 1 is Pi
    }
  }
  ASSERT_TRUE(held) << "no checkpoint held a finished Pi episode of several sequences";
  std::printf(
      "a checkpoint with %zu finished samples and %d running episodes after %d "
      "preemptions\n",
      finished.size(), running, attempts);
  std::fflush(stdout);  // before the next child inherits the buffer
  for (const auto& [id, n] : sequences) EXPECT_EQ(finished.count(id), 1u) << id;
  const int step_before = state["step"].get<int>();

  testing::LoomProcess resumed(TrainArgs(dir, tasks, kSteps, /*resume=*/true, batch_of_8),
                               dir / "resumed.out");
  ASSERT_EQ(resumed.Wait(), 0) << testing::ReadAll(dir / "resumed.out");
  auto metrics = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  std::vector<int> steps;
  Json resume;
  for (const Json& r : *metrics) {
    if (r.contains("loss")) steps.push_back(r["step"].get<int>());
    if (r.value("event", "") == "resume") resume = r;
  }
  std::vector<int> every_step(kSteps);
  std::iota(every_step.begin(), every_step.end(), 1);
  EXPECT_EQ(steps, every_step) << "every step once across the runs";
  ASSERT_FALSE(resume.is_null());
  EXPECT_EQ(resume["episodes_restarted"].get<int>(), running) << resume.dump();
  EXPECT_EQ(resume["finished_restored"].get<size_t>(), finished.size()) << resume.dump();
  std::map<uint64_t, Json> episodes;  // every ended episode's log line, by sample
  for (const Json& line : testing::ReadJsonLines(run_dir + "/trajectories.jsonl")) {
    episodes[line["sample"].get<uint64_t>()] = line;
  }
  std::set<uint64_t> trained;
  int restored_pi = 0;
  for (const Json& line : testing::ReadJsonLines(run_dir + "/samples.jsonl")) {
    const uint64_t id = line["id"].get<uint64_t>();
    EXPECT_TRUE(trained.insert(id).second) << "sample " << id << " trained twice";
    if (line["step"].get<int>() <= step_before || line.value("harness", "") != "pi") continue;
    if (finished.count(id) == 0) continue;
    // A finished Pi episode the checkpoint held trains with all of its
    // sequences, as its session left them.
    ASSERT_EQ(episodes.count(id), 1u) << id;
    const Json& episode = episodes[id];
    const size_t segments = episode["sequences"].size();
    EXPECT_EQ(line["sequences"].get<size_t>(), segments) << line.dump() << "\n" << episode.dump();
    EXPECT_EQ(sequences[id], segments > 0 ? segments - 1 : 0) << episode.dump();
    restored_pi += segments > 1;
  }
  EXPECT_GE(restored_pi, 1) << "no checkpointed Pi episode had several sequences";
}

// `loom tasks reverify RUN_DIR` replays the built-in loop's episodes in fresh
// sandboxes against the task file as it is now. The verification here only
// looks for a file the policy's tool calls may or may not have written:
// against the same file every replay gives its episode's verdict, and with
// the verification inverted every one flips. The untrained policy's turns do
// not parse, so one more episode is added to the log whose agent wrote the
// file with a tool call, and which an older verification had failed: its
// replay writes the file again, passes, and fails the inverted one. The probe harness's episodes,
// whose tool calls loom never saw, are counted apart.
TEST(HarnessTrainTest, ReverifyReplaysTheBuiltinEpisodesAgainstTheTaskFileAsItIsNow) {
  TempDir dir;
  auto task_file = [&](const std::string& name, const std::string& verification) {
    std::string lines;
    for (const char* id : {"hello-a", "hello-b"}) {
      const Json task = {{"id", id},
                         {"problem", std::string("Write hello.txt (task ") + id + ")."},
                         {"environment", {{"files", {{"probe.py", testing::kHarnessProbe}}}}},
                         {"verification", {{"command", verification}}}};
      lines += task.dump() + "\n";
    }
    return dir.Write(name, lines);
  };
  const std::string tasks = task_file("tasks.jsonl", "test -e hello.txt");
  const std::vector<std::string> no_pi = {"--set", "tasks.datasets[1].weight=0"};
  testing::LoomProcess train(TrainArgs(dir, tasks, 2, false, no_pi), dir / "train.out");
  ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(dir / "train.out");
  int builtin = 0, probes = 0;
  for (const Json& line : testing::ReadJsonLines(dir / "run/trajectories.jsonl")) {
    (line["dataset"] == "builtin" ? builtin : probes) += 1;
  }
  ASSERT_GE(builtin, 2);
  ASSERT_GE(probes, 1);
  const Json wrote = {
      {"sample", 1 << 30},
      {"dataset", "builtin"},
      {"trajectory",
       {{"task_id", "hello-b"},
        {"messages",
         {{{"role", "assistant"},
           {"tool_calls",
            {{{"id", "c0"},
              {"name", "write_file"},
              {"arguments_json", Json({{"path", "hello.txt"}, {"content", "hi"}}).dump()}}}}},
          {{"role", "tool"}, {"content", "wrote hello.txt"}},
          {{"role", "assistant"}, {"content", "Done."}}}},
        {"verdict", {{"passed", false}}},
        {"steps", 2}}}};
  {
    std::ofstream log(dir / "run/trajectories.jsonl", std::ios::app);
    log << wrote.dump() << "\n";
  }
  ++builtin;

  auto reverify_args = [&](const std::string& file) {
    std::string args = "tasks reverify --json --jobs 2 --config " LOOM_SOURCE_DIR
                       "/configs/test/harnesses.yaml --set sandbox.harness_dir=" LOOM_SOURCE_DIR
                       "/third_party/npm";
    for (int d = 0; d < 3; ++d) {
      args += " --set tasks.datasets[" + std::to_string(d) + "].path=" + file;
    }
    return args + " " + (dir / "run");
  };
  auto reverify = [&](const std::string& file) {
    auto run = testing::RunLoom(reverify_args(file));
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    return Json::parse(run.out.substr(run.out.rfind("\n{") + 1));
  };
  const Json same = reverify(tasks);
  EXPECT_EQ(same["attempts"], builtin + probes) << same.dump();
  EXPECT_EQ(same["skipped"].value("episode of an external harness", 0), probes) << same.dump();
  EXPECT_GE(same["rejudged"].get<int>(), builtin - 1) << same.dump();  // one may lose its sandbox
  EXPECT_EQ(same["flipped_to_pass"], 1) << same.dump();  // the episode that wrote hello.txt
  EXPECT_EQ(same["flipped_to_fail"], 0) << same.dump();
  ASSERT_EQ(same["tasks"].size(), 1u) << same.dump();
  EXPECT_EQ(same["tasks"][0]["task_id"], "hello-b");

  const Json inverted = reverify(task_file("inverted.jsonl", "! test -e hello.txt"));
  EXPECT_GE(inverted["rejudged"].get<int>(), builtin - 1) << inverted.dump();
  // Every episode of the policy flips to pass; the one that wrote hello.txt
  // fails again.
  EXPECT_EQ(inverted["flipped_to_pass"].get<int>(), inverted["rejudged"].get<int>() - 1)
      << inverted.dump();
  EXPECT_EQ(inverted["flipped_to_fail"], 0) << inverted.dump();

  // A line that is not a trajectory is named, by file and line.
  {
    std::ofstream log(dir / "run/trajectories.jsonl", std::ios::app);
    log << "{\"dataset\": \"builtin\"}\n";
  }
  auto broken = testing::RunLoom(reverify_args(tasks));
  EXPECT_EQ(broken.exit_code, 2) << broken.out << broken.err;
  EXPECT_NE(broken.err.find("trajectories.jsonl:" + std::to_string(builtin + probes + 1) +
                            ": not a trajectory line"),
            std::string::npos)
      << broken.err;
}

}  // namespace
}  // namespace loom
