// GRPO with `environment: sandbox` end to end: the real `loom train` binary,
// a tiny model in the real rollout engine, and 2 real local `loom worker`
// processes (configs/test/agent.yaml). The untrained model writes garbage, so
// its turns are cut at sandbox.max_turn_tokens and come back as format-error
// observations: every episode is multi-turn. The run's trajectories.jsonl
// (tokens, loss mask and the worker's trajectory of each finished sample) is
// checked against the metrics.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "loom/agent/chat_bridge.h"
#include "loom/chat/encoder.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/model/safetensors.h"
#include "loom/rpc/local_workers.h"
#include "loom/rpc/worker_pool.h"
#include "loom/tokenizer/tiny.h"
#include "testing/json_lines.h"
#include "testing/loom_process.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::TempDir;
using Json = nlohmann::json;

// The arguments of `loom train` on the agent test config.
std::vector<std::string> TrainArgs(const std::string& run_dir, const std::string& model_dir,
                                   int steps, bool resume = false,
                                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"train",
                                   "--config",
                                   LOOM_SOURCE_DIR "/configs/test/agent.yaml",
                                   "--run-dir",
                                   run_dir,
                                   "--set",
                                   "model.path=" + model_dir,
                                   "--set",
                                   "train.grpo.steps=" + std::to_string(steps)};
  if (resume) args.insert(args.end(), {"--resume", "auto"});
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// `loom train` on the agent test config as a child process.
class TrainProcess : public testing::LoomProcess {
 public:
  TrainProcess(const std::string& run_dir, const std::string& model_dir, int steps,
               bool resume = false, const std::vector<std::string>& extra = {})
      : LoomProcess(TrainArgs(run_dir, model_dir, steps, resume, extra), run_dir + ".out") {}
};

// A `loom worker` process that `parent` started, with its address.
struct WorkerProcess {
  pid_t pid = 0;
  std::string target;  // 127.0.0.1:PORT, from its --port-file
};

// The processes whose parent is `parent`.
std::vector<pid_t> Children(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string pid, comm, state;
    pid_t ppid = 0;
    if ((stat >> pid >> comm >> state >> ppid) && ppid == parent) {
      children.push_back(std::stoi(name));
    }
  }
  return children;
}

std::vector<WorkerProcess> WorkerChildren(pid_t parent) {
  std::vector<WorkerProcess> workers;
  for (pid_t child : Children(parent)) {
    const std::string proc = "/proc/" + std::to_string(child);
    std::vector<std::string> args;
    std::istringstream cmdline(testing::ReadAll(proc + "/cmdline"));
    for (std::string arg; std::getline(cmdline, arg, '\0');) args.push_back(arg);
    auto port_file = std::find(args.begin(), args.end(), "--port-file");
    if (args.size() < 2 || args[1] != "worker" || port_file == args.end() ||
        port_file + 1 == args.end()) {
      continue;
    }
    std::string port = testing::ReadAll(*(port_file + 1));
    while (!port.empty() && std::isspace(static_cast<unsigned char>(port.back()))) port.pop_back();
    workers.push_back({child, "127.0.0.1:" + port});
  }
  return workers;
}

// A sample's stretches of equal loss mask after the prompt, as token lists.
struct Runs {
  std::vector<std::vector<int64_t>> generated, observed;
};
Runs SplitRuns(const Json& record) {
  const auto tokens = record["tokens"].get<std::vector<int64_t>>();
  const auto mask = record["loss_mask"].get<std::vector<int>>();
  Runs runs;
  const size_t prompt = record["prompt_length"].get<size_t>();
  for (size_t t = prompt; t < tokens.size(); ++t) {
    auto& list = mask[t] ? runs.generated : runs.observed;
    if (t == prompt || mask[t] != mask[t - 1]) list.emplace_back();
    list.back().push_back(tokens[t]);
  }
  return runs;
}

class AgentTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = tokenizer::Tokenizer::FromJson(tokenizer::TinyTokenizerJson(), "tiny");
    ASSERT_TRUE(tok.ok());
    tok_ = std::move(*tok);
  }
  std::string Text(const std::vector<int64_t>& ids) const {
    auto text = tok_->Decode(std::vector<int32_t>(ids.begin(), ids.end()));
    EXPECT_TRUE(text.ok());
    return text.ok() ? *text : "";
  }

  std::unique_ptr<tokenizer::Tokenizer> tok_;
};

TEST_F(AgentTrainTest, GrpoStepsRunMultiTurnEpisodesOnRealWorkers) {
  TempDir dir;
  const std::string run_dir = dir / "run";
  TrainProcess train(run_dir, dir / "model", 3);
  ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(run_dir + ".out");

  // Steps complete, each on 4 finished episodes, none failed.
  auto metrics = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  int steps = 0, broken = 0;
  for (const Json& r : *metrics) {
    if (!r.contains("loss")) continue;
    ++steps;
    EXPECT_EQ(r["episodes"], 4) << r.dump();
    EXPECT_EQ(r["episodes_masked"], 0) << r.dump();
    broken += r["episodes_broken"].get<int>();
    EXPECT_GE(r["episode_steps_mean"].get<double>(), 2.0) << r.dump();
    EXPECT_TRUE(r["reward_by_dataset"].contains("agent_arithmetic")) << r.dump();
  }
  EXPECT_EQ(steps, 3);
  // Episodes that broke their environment are counted as samples.jsonl names them.
  int named_broken = 0;
  for (const Json& line : testing::ReadJsonLines(run_dir + "/samples.jsonl")) {
    named_broken += !line["episode"]["repercussion"].get<std::string>().empty();
  }
  EXPECT_EQ(broken, named_broken);

  const std::vector<Json> records = testing::ReadJsonLines(run_dir + "/trajectories.jsonl");
  ASSERT_GE(records.size(), 12u);
  for (const Json& record : records) {
    const Json& t = record["trajectory"];
    SCOPED_TRACE(record["sample"].dump());
    ASSERT_FALSE(t["penalty"].get<bool>()) << t.dump();
    // The reward arrived: the worker verified the episode.
    EXPECT_TRUE(t["verdict"].contains("reward"));
    EXPECT_NE(t["verdict"]["details"].get<std::string>(), "");
    ASSERT_EQ(record["tokens"].size(), record["loss_mask"].size());
    const std::string prompt = Text(std::vector<int64_t>(
        record["tokens"].begin(), record["tokens"].begin() + record["prompt_length"].get<int>()));
    EXPECT_NE(prompt.find(t["messages"][1]["content"].get<std::string>()), std::string::npos);
    EXPECT_NE(prompt.find("## Tools"), std::string::npos);  // schemas rendered by the chat module

    // One generated stretch per turn, one observation (loss mask 0) between turns.
    const Runs runs = SplitRuns(record);
    const int turns = t["steps"].get<int>();
    ASSERT_EQ(static_cast<int>(runs.generated.size()), turns);
    ASSERT_EQ(static_cast<int>(runs.observed.size()), turns - 1);

    // The trajectory's messages are what the engine generated: each turn
    // that parses is the next assistant message, the others are its format
    // errors; the worker's observations are the appended tokens, in order.
    // (The trajectory also records what the last turn led to — its tool
    // results or format error — which no later turn saw.)
    std::vector<Json> assistants, observations, unseen;
    for (size_t i = 2; i < t["messages"].size(); ++i) {
      const Json& m = t["messages"][i];
      if (m["role"] == "assistant") {
        assistants.push_back(m);
        observations.insert(observations.end(), unseen.begin(), unseen.end());
        unseen.clear();
      } else {
        unseen.push_back(m);
      }
    }
    int parsed = 0, failed = 0;
    for (int turn = 0; turn < turns; ++turn) {
      v1::GenerateReply reply = agent::ReplyFromCompletion(Text(runs.generated[turn]),
                                                           chat::ThinkingMode::kThinking, turn);
      if (reply.has_assistant()) {
        ASSERT_LT(parsed, static_cast<int>(assistants.size()));
        EXPECT_EQ(assistants[parsed++]["content"], reply.assistant().content());
      } else {
        ++failed;
      }
    }
    EXPECT_EQ(parsed, static_cast<int>(assistants.size()));
    EXPECT_EQ(failed, t["format_errors"].get<int>());
    // After the last assistant message: its tool results, then one format
    // error per failed turn. Only what the last turn led to is unseen.
    const bool last_failed =
        !agent::ReplyFromCompletion(Text(runs.generated.back()), chat::ThinkingMode::kThinking, 0)
             .has_assistant();
    if (last_failed) {
      unseen.pop_back();
      observations.insert(observations.end(), unseen.begin(), unseen.end());
    }
    std::string appended;
    for (const auto& run : runs.observed) appended += Text(run);
    size_t at = 0;
    for (const Json& observation : observations) {
      at = appended.find(observation["content"].get<std::string>(), at);
      ASSERT_NE(at, std::string::npos) << observation.dump() << "\nnot in\n" << appended;
    }
  }
}

// Once episodes flow, the index of one of `train`'s workers (in `workers`)
// whose load report shows an episode running in one of its sandboxes; -1
// when none did before the deadline.
int WorkerWithAnEpisode(const TrainProcess& train, const std::string& run_dir,
                        std::vector<WorkerProcess>& workers) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  // Two more finished episodes than the run directory had (a resumed run
  // appends to it).
  const size_t episodes = testing::ReadJsonLines(run_dir + "/trajectories.jsonl").size() + 2;
  while (testing::ReadJsonLines(run_dir + "/trajectories.jsonl").size() < episodes &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  workers = WorkerChildren(train.pid());
  if (workers.size() != 2) {
    ADD_FAILURE() << workers.size() << " workers found after "
                  << testing::ReadJsonLines(run_dir + "/trajectories.jsonl").size() << " episodes\n"
                  << testing::ReadAll(run_dir + ".out");
    return -1;
  }
  rpc::PoolOptions options;
  for (const WorkerProcess& w : workers) options.targets.push_back(w.target);
  rpc::WorkerPool pool(options);
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<rpc::WorkerLoad> loads = pool.Loads();
    for (size_t i = 0; i < loads.size(); ++i) {
      if (loads[i].episodes > 0) return static_cast<int>(i);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

TEST_F(AgentTrainTest, WorkerKilledMidRunMasksOnlyItsEpisodes) {
  TempDir dir;
  const std::string run_dir = dir / "run";
  TrainProcess train(run_dir, dir / "model", 4);
  // kill -9 a worker while an episode runs on it. (A session that is opening
  // would be placed again on the other worker, one that is closing has its
  // verdict already: neither loses an episode.)
  std::vector<WorkerProcess> workers;
  const int victim = WorkerWithAnEpisode(train, run_dir, workers);
  ASSERT_GE(victim, 0);
  ASSERT_EQ(::kill(workers[victim].pid, SIGKILL), 0);

  ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(run_dir + ".out");
  auto metrics = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  int steps = 0, masked = 0;
  for (const Json& r : *metrics) {
    if (!r.contains("loss")) continue;
    ++steps;
    masked += r["episodes_masked"].get<int>();
    int by_cause = 0;
    for (const auto& [cause, count] : r["episodes_masked_by_cause"].items()) {
      EXPECT_TRUE(cause == "worker_lost" || cause == "no_sandbox") << cause;
      by_cause += count.get<int>();
    }
    EXPECT_EQ(by_cause, r["episodes_masked"].get<int>());
  }
  EXPECT_EQ(steps, 4);
  std::set<uint64_t> lost;
  for (const Json& record : testing::ReadJsonLines(run_dir + "/trajectories.jsonl")) {
    const Json& t = record["trajectory"];
    if (!t["penalty"].get<bool>()) continue;
    const std::string reason = t["failure_reason"];
    EXPECT_TRUE(reason.rfind("worker_lost", 0) == 0 || reason.rfind("no_sandbox", 0) == 0)
        << reason;
    lost.insert(record["sample"].get<uint64_t>());
  }
  EXPECT_GE(lost.size(), 1u);
  EXPECT_GE(masked, 1);
  EXPECT_LE(masked, static_cast<int>(lost.size()));
  // The lost episodes were not trained on; the others were.
  int trained = 0;
  for (const Json& line : testing::ReadJsonLines(run_dir + "/samples.jsonl")) {
    EXPECT_EQ(lost.count(line["id"].get<uint64_t>()), 0u) << line.dump();
    ASSERT_TRUE(line.contains("episode")) << line.dump();
    ++trained;
  }
  EXPECT_GE(trained, 4 * 4 - masked);
}

// SIGTERM while episodes run: the trainer checkpoints and exits 0. The
// checkpoint keeps every finished agent sample's outcome and names the
// running episodes, which the resumed run starts again and trains on.
TEST_F(AgentTrainTest, SigtermMidEpisodeCheckpointsAndTheResumeStartsItAgain) {
  TempDir dir;
  const std::string run_dir = dir / "run";
  constexpr int kSteps = 6;
  // Batches of 8 with 4 samples in flight: finished samples wait for the
  // batch while others run. Preempt (resuming each time) until a checkpoint
  // holds both a finished, untrained agent sample and a running episode.
  const std::vector<std::string> batch_of_8 = {"--set", "async.batch_samples=8"};
  std::map<uint64_t, Json> finished;  // id -> its episode's outcome
  int running = 0, attempts = 0;
  for (; attempts < 5 && (finished.empty() || running == 0); ++attempts) {
    const int attempt = attempts;
    TrainProcess train(run_dir, dir / "model", kSteps, /*resume=*/attempt > 0, batch_of_8);
    std::vector<WorkerProcess> workers;
    ASSERT_GE(WorkerWithAnEpisode(train, run_dir, workers), 0);
    train.Signal(SIGTERM);
    ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(run_dir + ".out");
    std::string latest = testing::ReadAll(run_dir + "/checkpoints/latest");
    while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back()))) {
      latest.pop_back();
    }
    const std::string checkpoint = run_dir + "/checkpoints/" + latest;
    const Json state = Json::parse(testing::ReadAll(checkpoint + "/state.json"));
    finished.clear();
    running = 0;
    for (const Json& r : state["grpo"]["records"]) {
      ASSERT_TRUE(r.value("agent", false)) << r.dump();
      if (r.contains("outcome")) {
        finished[r["id"].get<uint64_t>()] = r["outcome"];
      } else {
        ++running;
      }
    }
    const Json manifest = Json::parse(testing::ReadAll(checkpoint + "/manifest.json"));
    EXPECT_EQ(manifest["meta"]["running_episodes"], running) << manifest["meta"].dump();
    EXPECT_EQ(manifest["meta"]["finished_samples"], finished.size()) << manifest["meta"].dump();
    EXPECT_EQ(manifest["meta"]["inflight_samples"], 0) << "agent samples are not exported";
  }
  ASSERT_FALSE(finished.empty()) << attempts << " preemptions";
  ASSERT_GE(running, 1) << attempts << " preemptions";
  std::printf(
      "a checkpoint with %zu finished samples and %d running episodes after %d "
      "preemptions\n",
      finished.size(), running, attempts);
  std::fflush(stdout);  // before the next child inherits the buffer
  const size_t lines_before = testing::ReadJsonLines(run_dir + "/samples.jsonl").size();

  TrainProcess resumed(run_dir, dir / "model", kSteps, /*resume=*/true, batch_of_8);
  ASSERT_EQ(resumed.Wait(), 0) << testing::ReadAll(run_dir + ".out");
  auto metrics = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  std::vector<int> steps;
  Json last_resume;
  for (const Json& r : *metrics) {
    if (r.contains("loss")) steps.push_back(r["step"].get<int>());
    if (r.value("event", "") == "resume") last_resume = r;
  }
  ASSERT_FALSE(last_resume.is_null());
  EXPECT_EQ(last_resume["episodes_restarted"].get<int>(), running);
  EXPECT_EQ(last_resume["finished_restored"].get<size_t>(), finished.size());
  std::vector<int> every_step(kSteps);
  std::iota(every_step.begin(), every_step.end(), 1);
  EXPECT_EQ(steps, every_step) << "every step once across the runs";
  // Finished samples trained after the last resume carry their episodes' records.
  std::set<uint64_t> trained;
  int restored_trained = 0;
  const std::vector<Json> lines = testing::ReadJsonLines(run_dir + "/samples.jsonl");
  for (size_t i = 0; i < lines.size(); ++i) {
    const uint64_t id = lines[i]["id"].get<uint64_t>();
    EXPECT_TRUE(trained.insert(id).second) << "sample " << id << " trained twice";
    auto it = finished.find(id);
    if (it == finished.end()) continue;
    EXPECT_GE(i, lines_before) << "sample " << id << " trained before the checkpoint";
    ++restored_trained;
    const Json& episode = lines[i]["episode"];
    EXPECT_EQ(episode["steps"], it->second["steps"]) << id;
    EXPECT_EQ(episode["format_errors"], it->second["format_errors"]) << id;
    EXPECT_EQ(episode["failure_reason"], it->second["failure_reason"]) << id;
    EXPECT_EQ(episode["reward"], it->second["reward"]) << id;
  }
  EXPECT_GE(restored_trained, 1);
}

// The newest checkpoint of `run_dir`.
std::string LatestCheckpoint(const std::string& run_dir) {
  std::string latest = testing::ReadAll(run_dir + "/checkpoints/latest");
  while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back()))) {
    latest.pop_back();
  }
  return run_dir + "/checkpoints/" + latest;
}

// The directories of a checkpoint that hold a loop's share: its own (rank
// 0's) and ranks/rank<r>/ for the other ranks that wrote it.
std::vector<std::string> ShareDirs(const std::string& checkpoint) {
  std::vector<std::string> dirs = {checkpoint};
  for (int r = 1; std::filesystem::exists(checkpoint + "/ranks/rank" + std::to_string(r)); ++r) {
    dirs.push_back(checkpoint + "/ranks/rank" + std::to_string(r));
  }
  return dirs;
}

std::vector<std::string> Launch2(std::vector<std::string> train) {
  std::vector<std::string> args = {"launch", "--nproc", "2", "--"};
  args.insert(args.end(), train.begin(), train.end());
  return args;
}

// Remote workers (started here, so they outlive every trainer) and a run
// on them, on `ranks` ranks, that is preempted while episodes run, until its
// checkpoint holds episodes to attach to again.
class RemoteAgentRun {
 public:
  RemoteAgentRun(const TempDir& dir, const std::string& name, bool deterministic = false,
                 int ranks = 1)
      : dir_(dir), run_dir_(dir / name), deterministic_(deterministic), ranks_(ranks) {
    rpc::LocalWorkerOptions local;
    local.binary = LOOM_BINARY;
    local.count = 2;
    local.max_sandboxes = 8;
    auto workers = rpc::LocalWorkers::Start(local);
    EXPECT_TRUE(workers.ok()) << workers.status();
    if (workers.ok()) workers_ = *std::move(workers);
  }
  rpc::LocalWorkers& workers() { return *workers_; }
  const std::string& run_dir() const { return run_dir_; }

  // `loom train` on the workers, on `ranks` ranks (0: as many as the run
  // was made with).
  testing::LoomProcess Train(bool resume, int ranks = 0) {
    const auto& t = workers_->targets();
    std::vector<std::string> extra = {"--set", "async.batch_samples=8",
                                      "--set", "sandbox.local=0",
                                      "--set", "sandbox.workers=[" + t[0] + ", " + t[1] + "]"};
    if (deterministic_) {
      extra.insert(extra.end(), {"--set", "run.deterministic=true", "--set", "run.threads=1"});
    }
    std::vector<std::string> args = TrainArgs(run_dir_, dir_ / "model", kSteps, resume, extra);
    if ((ranks == 0 ? ranks_ : ranks) == 2) args = Launch2(args);
    return testing::LoomProcess(args, run_dir_ + ".out");
  }

  // Preempts the run (resuming it each time) while an episode runs, until
  // its checkpoint records episodes to attach to (on leased sessions, with
  // turns in their samples) — on 2 ranks, in both ranks' shares; returns
  // them by sample id, with their tokens then in `tokens`.
  std::map<uint64_t, Json> PreemptWithEpisodes(std::map<uint64_t, Json>& tokens) {
    std::map<uint64_t, Json> episodes;
    std::set<size_t> shares_with_episodes;
    rpc::PoolOptions options;
    options.targets = workers_->targets();
    rpc::WorkerPool pool(options);
    for (int attempt = 0; attempt < 5 && shares_with_episodes.size() < static_cast<size_t>(ranks_);
         ++attempt) {
      episodes.clear();
      shares_with_episodes.clear();
      const size_t before = testing::ReadJsonLines(run_dir_ + "/trajectories.jsonl").size();
      testing::LoomProcess train = Train(/*resume=*/attempt > 0 || resumed_);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
      // Two episodes more than before, then one running.
      bool running = false;
      while (!running && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (testing::ReadJsonLines(run_dir_ + "/trajectories.jsonl").size() < before + 2) continue;
        for (const rpc::WorkerLoad& load : pool.Loads()) running |= load.episodes > load.detached;
      }
      EXPECT_TRUE(running) << testing::ReadAll(run_dir_ + ".out");
      train.Signal(SIGTERM);
      EXPECT_EQ(train.Wait(), 0) << testing::ReadAll(run_dir_ + ".out");
      const std::vector<std::string> shares = ShareDirs(LatestCheckpoint(run_dir_));
      EXPECT_EQ(shares.size(), static_cast<size_t>(ranks_));
      for (size_t i = 0; i < shares.size(); ++i) {
        const Json state = Json::parse(testing::ReadAll(shares[i] + "/state.json"));
        for (const Json& r : state["grpo"]["records"]) {
          // An episode without turns has no sample yet: it starts again.
          if (r.contains("episode") && !r["episode"]["turns"].empty()) {
            episodes[r["id"].get<uint64_t>()] = r["episode"];
            shares_with_episodes.insert(i);
          }
        }
      }
      // The workers keep exactly the episodes recorded to attach to; the
      // trainer released the others on its way out.
      const auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      int live = -1;
      while (live != static_cast<int>(episodes.size()) &&
             std::chrono::steady_clock::now() < settle) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        live = 0;
        for (const rpc::WorkerLoad& load : pool.Loads()) live += load.live;
      }
      EXPECT_EQ(live, static_cast<int>(episodes.size()));
      tokens.clear();
      for (const std::string& share : shares) {
        auto tensors = model::ReadSafetensors(share + "/samples.safetensors");
        EXPECT_TRUE(tensors.ok()) << tensors.status();
        for (const auto& [name, tensor] : tensors.ok() ? *tensors : model::TensorMap()) {
          const size_t slash = name.find('/');
          if (name.substr(slash + 1) != "tokens") continue;
          const at::Tensor ids = tensor.contiguous();
          tokens[std::stoull(name.substr(0, slash))] =
              std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
        }
      }
    }
    resumed_ = true;
    return episodes;
  }

  static constexpr int kSteps = 6;

 private:
  const TempDir& dir_;
  const std::string run_dir_;
  const bool deterministic_;
  const int ranks_;
  std::unique_ptr<rpc::LocalWorkers> workers_;
  bool resumed_ = false;
};

// The samples of `episodes` (records by sample id) logged in `trajectories`
// from line `from` on, each checked to carry on the token sequence the
// checkpoint held (`tokens`) without penalty, its worker's record spanning
// both trainers (every turn the checkpoint had, then more). Returns how many
// were logged.
int ExpectCarriedOn(const std::string& trajectories, size_t from,
                    const std::map<uint64_t, Json>& episodes,
                    const std::map<uint64_t, Json>& tokens) {
  int continued = 0;
  const std::vector<Json> logged = testing::ReadJsonLines(trajectories);
  for (size_t i = from; i < logged.size(); ++i) {
    const uint64_t id = logged[i]["sample"].get<uint64_t>();
    auto episode = episodes.find(id);
    if (episode == episodes.end()) continue;
    ++continued;
    const auto before = tokens.at(id).get<std::vector<int64_t>>();
    const auto after = logged[i]["tokens"].get<std::vector<int64_t>>();
    EXPECT_GE(after.size(), before.size()) << id;
    if (after.size() < before.size()) continue;
    EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin())) << id;
    const Json& trajectory = logged[i]["trajectory"];
    EXPECT_GE(trajectory["steps"].get<size_t>(), episode->second["turns"].size()) << id;
    EXPECT_FALSE(trajectory["penalty"].get<bool>()) << trajectory.dump();
  }
  return continued;
}

// The sandboxes live on `targets` once they settle (within 2 s).
int LiveSandboxes(const std::vector<std::string>& targets) {
  rpc::PoolOptions options;
  options.targets = targets;
  rpc::WorkerPool pool(options);
  int live = 0;
  for (int i = 0; i < 100; ++i) {
    live = 0;
    for (const rpc::WorkerLoad& load : pool.Loads()) live += load.live;
    if (live == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return live;
}

// The resume event of a run's last start, and its last step line.
std::pair<Json, Json> LastResumeAndStep(const std::string& run_dir) {
  auto metrics = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  Json resume, step;
  for (const Json& r : metrics.ok() ? *metrics : std::vector<Json>()) {
    if (r.value("event", "") == "resume") resume = r;
    if (r.contains("loss")) step = r;
  }
  return {resume, step};
}

// With remote workers, a preempted run leaves its running episodes on them
// under a lease, and the resumed run attaches to each again: the episode
// goes on in the same sandbox, its sample continues the very tokens the
// checkpoint held, and nothing starts again.
TEST_F(AgentTrainTest, SigtermMidEpisodeThenResumeAttachesToTheRunningEpisodes) {
  TempDir dir;
  RemoteAgentRun run(dir, "run");
  std::map<uint64_t, Json> tokens;
  const std::map<uint64_t, Json> episodes = run.PreemptWithEpisodes(tokens);
  ASSERT_FALSE(episodes.empty()) << "no checkpoint recorded a running episode";
  for (const auto& [id, episode] : episodes) {
    ASSERT_EQ(tokens.count(id), 1u) << "sample " << id << ": an episode record without tokens";
  }
  const size_t logged_before = testing::ReadJsonLines(run.run_dir() + "/trajectories.jsonl").size();

  testing::LoomProcess resumed = run.Train(/*resume=*/true);
  ASSERT_EQ(resumed.Wait(), 0) << testing::ReadAll(run.run_dir() + ".out");
  const auto [resume, step] = LastResumeAndStep(run.run_dir());
  EXPECT_EQ(resume["episodes_resumed"].get<size_t>(), episodes.size()) << resume;
  EXPECT_EQ(step["step"], RemoteAgentRun::kSteps);
  EXPECT_EQ(step["episodes_not_reattached"], 0) << step;
  const int continued =
      ExpectCarriedOn(run.run_dir() + "/trajectories.jsonl", logged_before, episodes, tokens);
  EXPECT_GE(continued, 1) << "no attached episode finished";
  // The run ended for good: the workers keep none of its episodes for later.
  EXPECT_EQ(LiveSandboxes(run.workers().targets()), 0)
      << "sandboxes left on the workers after the run";
  std::printf("%zu episodes attached again, %d finished and logged\n", episodes.size(), continued);
  std::fflush(stdout);
}

// The resume events of a metrics file, in order.
std::vector<Json> ResumeEvents(const std::string& path) {
  std::vector<Json> events;
  for (const Json& r : testing::ReadJsonLines(path)) {
    if (r.value("event", "") == "resume") events.push_back(r);
  }
  return events;
}

// A 2-rank run preempted while episodes run leaves both ranks' episodes on
// the workers they share. Resumed on 2 ranks, each rank attaches to its own
// again; preempted again and resumed on 1 rank, rank 0 takes over rank 1's
// share and attaches to the episodes of both: none starts again, each
// continues its checkpointed tokens, and no sandbox is left behind.
TEST_F(AgentTrainTest, TwoRankRunPreemptedMidEpisodeResumesOnTwoRanksThenOnOne) {
  TempDir dir;
  RemoteAgentRun run(dir, "run", /*deterministic=*/false, /*ranks=*/2);
  const std::string metrics0 = run.run_dir() + "/metrics.jsonl",
                    metrics1 = run.run_dir() + "/metrics.rank1.jsonl";
  std::map<uint64_t, Json> tokens;
  const std::map<uint64_t, Json> first = run.PreemptWithEpisodes(tokens);
  ASSERT_FALSE(first.empty()) << "no checkpoint recorded a running episode";
  const size_t resumes = ResumeEvents(metrics0).size();
  ASSERT_EQ(ResumeEvents(metrics1).size(), resumes);

  const std::map<uint64_t, Json> second = run.PreemptWithEpisodes(tokens);
  ASSERT_FALSE(second.empty()) << "no checkpoint recorded a running episode";
  const std::vector<Json> on_rank0 = ResumeEvents(metrics0), on_rank1 = ResumeEvents(metrics1);
  ASSERT_GT(on_rank0.size(), resumes);
  ASSERT_GT(on_rank1.size(), resumes);
  EXPECT_EQ(on_rank0[resumes]["ranks_written"], 2);
  EXPECT_EQ(on_rank0[resumes]["episodes_resumed"].get<size_t>() +
                on_rank1[resumes]["episodes_resumed"].get<size_t>(),
            first.size())
      << on_rank0[resumes] << on_rank1[resumes];
  const std::string checkpoint = LatestCheckpoint(run.run_dir());
  const Json rank1_state = Json::parse(testing::ReadAll(checkpoint + "/ranks/rank1/state.json"));
  size_t of_rank1 = 0;
  for (const Json& r : rank1_state["grpo"]["records"])
    of_rank1 += second.count(r["id"].get<uint64_t>());
  ASSERT_GE(of_rank1, 1u) << "rank 1 had no running episode to take over";
  const size_t logged_before = testing::ReadJsonLines(run.run_dir() + "/trajectories.jsonl").size();
  testing::LoomProcess on_one = run.Train(/*resume=*/true, /*ranks=*/1);
  ASSERT_EQ(on_one.Wait(), 0) << testing::ReadAll(run.run_dir() + ".out");
  const auto [resume, step] = LastResumeAndStep(run.run_dir());
  EXPECT_EQ(resume["ranks_written"], 2) << resume;
  EXPECT_EQ(resume["ranks_taken_over"], Json::array({1})) << resume;
  EXPECT_EQ(resume["episodes_resumed"].get<size_t>(), second.size()) << resume;
  EXPECT_EQ(step["step"], RemoteAgentRun::kSteps);
  EXPECT_EQ(step["episodes_not_reattached"], 0) << step;
  const int continued =
      ExpectCarriedOn(run.run_dir() + "/trajectories.jsonl", logged_before, second, tokens);
  EXPECT_GE(continued, 1) << "no attached episode finished";
  EXPECT_EQ(LiveSandboxes(run.workers().targets()), 0)
      << "sandboxes left on the workers after the run";
  std::printf(
      "%zu episodes attached again on 2 ranks; %zu in the next checkpoint (%zu of rank 1's) "
      "attached again on 1 rank, %d finished and logged\n",
      first.size(), second.size(), of_rank1, continued);
  std::fflush(stdout);
}

// The checkpoint's snapshot of an episode (see EpisodeRecord), if it has one.
std::optional<v1::EpisodeSnapshot> SnapshotOf(const Json& episode) {
  if (!episode.contains("snapshot")) return std::nullopt;
  std::string bytes;
  v1::EpisodeSnapshot snapshot;
  EXPECT_TRUE(absl::Base64Unescape(episode["snapshot"].get<std::string>(), &bytes));
  EXPECT_TRUE(snapshot.ParseFromString(bytes));
  return snapshot;
}

// Of a checkpoint's episodes, those on the worker that holds the most.
struct Victim {
  int index = 0;
  int episodes = 0;    // recorded on it
  int restorable = 0;  // of them, with a snapshot to go on from
  int ended = 0;       // of them, ended as the checkpoint was taken
};

Victim PickVictim(RemoteAgentRun& run, const std::map<uint64_t, Json>& episodes) {
  std::map<std::string, int> on;
  for (const auto& [id, episode] : episodes) ++on[episode["target"].get<std::string>()];
  Victim victim;
  const auto& targets = run.workers().targets();
  victim.index = on[targets[1]] > on[targets[0]] ? 1 : 0;
  for (const auto& [id, episode] : episodes) {
    if (episode["target"] != targets[victim.index]) continue;
    ++victim.episodes;
    const std::optional<v1::EpisodeSnapshot> snapshot = SnapshotOf(episode);
    if (snapshot && snapshot->has_pending()) ++victim.restorable;
    if (snapshot && !snapshot->has_pending()) ++victim.ended;
  }
  return victim;
}

// A worker that dies between the preemption and the resume takes its
// sandboxes with it: its episodes go on from the checkpoint's snapshots on
// the worker left — the same token sequences carried on, the worker's record
// spanning both — and only one without a snapshot would start again.
TEST_F(AgentTrainTest, WorkerKilledBeforeTheResumeRestoresItsEpisodesFromSnapshots) {
  TempDir dir;
  RemoteAgentRun run(dir, "run");
  std::map<uint64_t, Json> tokens;
  const std::map<uint64_t, Json> episodes = run.PreemptWithEpisodes(tokens);
  ASSERT_FALSE(episodes.empty()) << "no checkpoint recorded a running episode";
  int snapshots = 0;
  for (const auto& [id, episode] : episodes) snapshots += SnapshotOf(episode).has_value();
  EXPECT_EQ(snapshots, static_cast<int>(episodes.size())) << "a running episode has no snapshot";
  const Victim victim = PickVictim(run, episodes);
  run.workers().Kill(victim.index);
  const size_t logged_before = testing::ReadJsonLines(run.run_dir() + "/trajectories.jsonl").size();
  testing::LoomProcess resumed = run.Train(/*resume=*/true);
  ASSERT_EQ(resumed.Wait(), 0) << testing::ReadAll(run.run_dir() + ".out");
  const auto [resume, step] = LastResumeAndStep(run.run_dir());
  EXPECT_EQ(resume["episodes_resumed"].get<size_t>(), episodes.size()) << resume;
  EXPECT_EQ(step["step"], RemoteAgentRun::kSteps);
  EXPECT_EQ(step["episodes_restored"], victim.restorable) << step;
  EXPECT_EQ(step["episodes_not_reattached"], victim.episodes - victim.ended) << step;
  const std::string victim_target = run.workers().targets()[victim.index];
  int restored = 0;
  const std::vector<Json> logged = testing::ReadJsonLines(run.run_dir() + "/trajectories.jsonl");
  for (size_t i = logged_before; i < logged.size(); ++i) {
    const uint64_t id = logged[i]["sample"].get<uint64_t>();
    auto episode = episodes.find(id);
    if (episode == episodes.end() || episode->second["target"] != victim_target) continue;
    const std::optional<v1::EpisodeSnapshot> snapshot = SnapshotOf(episode->second);
    if (!snapshot || !snapshot->has_pending()) continue;
    ++restored;
    const auto before = tokens[id].get<std::vector<int64_t>>();
    const auto after = logged[i]["tokens"].get<std::vector<int64_t>>();
    ASSERT_GE(after.size(), before.size()) << id;
    EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin())) << id;
    const Json& trajectory = logged[i]["trajectory"];
    EXPECT_FALSE(trajectory["penalty"].get<bool>()) << trajectory.dump();
    EXPECT_NE(trajectory["worker"], victim_target);
    // Every message the snapshot held, then the rest.
    ASSERT_GE(trajectory["messages"].size(),
              static_cast<size_t>(snapshot->trajectory().messages_size()));
    EXPECT_EQ(trajectory["messages"][0]["content"], snapshot->trajectory().messages(0).content());
  }
  std::printf(
      "%zu episodes in the checkpoint, %d on the killed worker: %d restored from "
      "snapshots (%d finished and logged), %d ended at the checkpoint\n",
      episodes.size(), victim.episodes, victim.restorable, restored, victim.ended);
  std::fflush(stdout);
}

// Every step line of a run by step, and every logged agent sample by id.
std::map<int, Json> StepLines(const std::string& run_dir) {
  std::map<int, Json> steps;
  auto metrics = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  for (const Json& r : metrics.ok() ? *metrics : std::vector<Json>()) {
    if (r.contains("loss")) steps[r["step"].get<int>()] = r;  // the last line of a step
  }
  return steps;
}

std::map<uint64_t, Json> LoggedSamples(const std::string& run_dir) {
  std::map<uint64_t, Json> samples;
  for (const Json& line : testing::ReadJsonLines(run_dir + "/trajectories.jsonl")) {
    samples[line["sample"].get<uint64_t>()] = line;
  }
  return samples;
}

// With run.deterministic the engine waits for the workers at every step, so
// an agent run repeats exactly. Preempted mid-episode and resumed, it equals
// the uninterrupted run: every step's loss and reward, every sample's tokens
// and the worker's record of its episode — whether the resumed run attaches
// to its episodes or, its worker killed meanwhile, goes on from snapshots.
void ExpectPreemptedRunEqualsTheUninterruptedOne(bool kill_a_worker) {
  TempDir dir;
  RemoteAgentRun baseline(dir, "baseline", /*deterministic=*/true);
  {
    testing::LoomProcess train = baseline.Train(/*resume=*/false);
    ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(baseline.run_dir() + ".out");
  }
  RemoteAgentRun run(dir, "preempted", /*deterministic=*/true);
  std::map<uint64_t, Json> tokens;
  const std::map<uint64_t, Json> episodes = run.PreemptWithEpisodes(tokens);
  ASSERT_FALSE(episodes.empty()) << "no checkpoint recorded a running episode";
  Victim victim;
  if (kill_a_worker) {
    victim = PickVictim(run, episodes);
    EXPECT_EQ(victim.restorable + victim.ended, victim.episodes) << "an episode without snapshot";
    run.workers().Kill(victim.index);
  }
  {
    testing::LoomProcess resumed = run.Train(/*resume=*/true);
    ASSERT_EQ(resumed.Wait(), 0) << testing::ReadAll(run.run_dir() + ".out");
  }
  const std::map<int, Json> want = StepLines(baseline.run_dir());
  const std::map<int, Json> got = StepLines(run.run_dir());
  ASSERT_EQ(want.size(), static_cast<size_t>(RemoteAgentRun::kSteps));
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [step, line] : want) {
    EXPECT_NEAR(got.at(step)["loss"].get<double>(), line["loss"].get<double>(), 1e-6) << step;
    EXPECT_NEAR(got.at(step)["reward_mean"].get<double>(), line["reward_mean"].get<double>(), 1e-6)
        << step;
  }
  EXPECT_EQ(got.rbegin()->second["episodes_restored"], victim.restorable);
  const std::map<uint64_t, Json> want_samples = LoggedSamples(baseline.run_dir());
  const std::map<uint64_t, Json> got_samples = LoggedSamples(run.run_dir());
  int compared = 0, resumed = 0;
  for (const auto& [id, line] : got_samples) {
    auto same = want_samples.find(id);
    if (same == want_samples.end()) continue;  // finished after the baseline stopped
    ++compared;
    resumed += episodes.count(id);
    EXPECT_EQ(line["tokens"], same->second["tokens"]) << "sample " << id;
    const Json& a = line["trajectory"];
    const Json& b = same->second["trajectory"];
    for (const char* key :
         {"messages", "verdict", "answer", "failure_reason", "steps", "format_errors", "penalty"}) {
      EXPECT_EQ(a[key], b[key]) << "sample " << id << ": " << key;
    }
  }
  EXPECT_GE(compared, RemoteAgentRun::kSteps * 4);
  EXPECT_GE(resumed, 1) << "no resumed episode was compared";
  std::printf(
      "%d samples equal to the uninterrupted run's, %d of them resumed (%d from "
      "snapshots after their worker was killed)\n",
      compared, resumed, victim.restorable);
  std::fflush(stdout);
}

TEST_F(AgentTrainTest, DeterministicRunPreemptedMidEpisodeEqualsTheUninterruptedOne) {
  ExpectPreemptedRunEqualsTheUninterruptedOne(/*kill_a_worker=*/false);
}

TEST_F(AgentTrainTest, DeterministicRunWhoseWorkerDiedBeforeTheResumeEqualsTheUninterruptedOne) {
  ExpectPreemptedRunEqualsTheUninterruptedOne(/*kill_a_worker=*/true);
}

// `loom train` on the agent test config in sync dispatch with
// run.deterministic and a length reward (so that subgroups differ).
std::vector<std::string> AgentTrainArgs(const std::string& run_dir, const std::string& model_dir,
                                        int steps) {
  return TrainArgs(
      run_dir, model_dir, steps, /*resume=*/false,
      {"--set", "async.dispatch=sync", "--set", "async.batch_samples=8", "--set",
       "async.max_inflight=8", "--set", "run.deterministic=true", "--set", "run.threads=1", "--set",
       "grpo.length_reward.k0=1", "--set", "grpo.length_reward.l_norm=200"});
}

// The rank process `rank` of a `loom launch`.
pid_t RankChild(pid_t launcher, int rank) {
  for (pid_t child : Children(launcher)) {
    std::istringstream environ(testing::ReadAll("/proc/" + std::to_string(child) + "/environ"));
    for (std::string var; std::getline(environ, var, '\0');) {
      if (var == "RANK=" + std::to_string(rank)) return child;
    }
  }
  return -1;
}

// Agent episodes on 2 ranks, each rank with its own local workers: in sync
// dispatch with run.deterministic they train like 1 rank on the same global
// batch — the same losses, rewards and episodes — and both ranks hold the
// same weights after every step.
TEST_F(AgentTrainTest, TwoRanksRunEpisodesLikeOne) {
  TempDir dir;
  const std::string model = dir / "model", one = dir / "one", two = dir / "two";
  {
    testing::LoomProcess single(AgentTrainArgs(one, model, 5), one + ".out");
    ASSERT_EQ(single.Wait(), 0) << testing::ReadAll(one + ".out");
  }
  {
    testing::LoomProcess launched(Launch2(AgentTrainArgs(two, model, 5)), two + ".out");
    ASSERT_EQ(launched.Wait(), 0) << testing::ReadAll(two + ".out");
  }
  const std::map<int, Json> reference = StepLines(one);
  const std::map<int, Json> rank0 = StepLines(two);
  std::map<int, Json> rank1;
  for (const Json& r : testing::ReadJsonLines(two + "/metrics.rank1.jsonl")) {
    if (r.contains("loss")) rank1[r["step"].get<int>()] = r;
  }
  ASSERT_EQ(reference.size(), 5u);
  ASSERT_EQ(rank0.size(), 5u);
  ASSERT_EQ(rank1.size(), 5u);
  bool informative = false;
  for (const auto& [step, line] : reference) {
    EXPECT_NEAR(rank0.at(step)["loss"].get<double>(), line["loss"].get<double>(), 1e-6) << step;
    EXPECT_EQ(rank0.at(step)["reward_mean"], line["reward_mean"]) << step;
    EXPECT_EQ(rank0.at(step)["samples"], 8);
    EXPECT_EQ(rank0.at(step)["rank_samples"], 4);
    EXPECT_EQ(rank1.at(step)["rank_samples"], 4);
    EXPECT_EQ(rank0.at(step)["weights_checksum"], rank1.at(step)["weights_checksum"]) << step;
    informative = informative || line["loss"].get<double>() != 0;
  }
  EXPECT_TRUE(informative) << "no step had rewards to learn from: the test shows nothing";
  // The same episodes, split between the ranks' logs.
  auto sequences = [](const std::vector<std::string>& paths) {
    std::multiset<std::vector<int64_t>> all;
    for (const std::string& path : paths) {
      for (const Json& line : testing::ReadJsonLines(path))
        all.insert(line["tokens"].get<std::vector<int64_t>>());
    }
    return all;
  };
  const auto want = sequences({one + "/trajectories.jsonl"});
  const auto got = sequences({two + "/trajectories.jsonl", two + "/trajectories.rank1.jsonl"});
  EXPECT_EQ(want.size(), 40u);
  EXPECT_GE(testing::ReadJsonLines(two + "/trajectories.rank1.jsonl").size(), 20u);
  EXPECT_TRUE(want == got) << "the 2-rank run's episodes differ from the 1-rank run's";
}

// A rank whose workers all die loses every episode to infrastructure: its
// batches are empty after masking, yet it takes part in every step, so the
// run finishes with the other rank's samples and identical weights.
TEST_F(AgentTrainTest, ARankThatLostItsWorkersTrainsOnNothingAndKeepsUp) {
  TempDir dir;
  const std::string run = dir / "run";
  testing::LoomProcess launched(Launch2(AgentTrainArgs(run, dir / "model", 5)), run + ".out");
  // After the first step, kill -9 rank 1's workers.
  pid_t rank1 = -1;
  std::vector<WorkerProcess> workers;
  for (int i = 0; i < 1200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::vector<Json> lines = testing::ReadJsonLines(run + "/metrics.jsonl");
    if (std::none_of(lines.begin(), lines.end(),
                     [](const Json& r) { return r.contains("loss"); })) {
      continue;
    }
    rank1 = RankChild(launched.pid(), 1);
    workers = WorkerChildren(rank1);
    break;
  }
  ASSERT_GT(rank1, 0) << testing::ReadAll(run + ".out");
  ASSERT_EQ(workers.size(), 2u);
  for (const WorkerProcess& w : workers) ASSERT_EQ(::kill(w.pid, SIGKILL), 0);
  ASSERT_EQ(launched.Wait(), 0) << testing::ReadAll(run + ".out");
  const std::map<int, Json> rank0 = StepLines(run);
  std::map<int, Json> ranked1;
  for (const Json& r : testing::ReadJsonLines(run + "/metrics.rank1.jsonl")) {
    if (r.contains("loss")) ranked1[r["step"].get<int>()] = r;
  }
  ASSERT_EQ(rank0.size(), 5u);
  ASSERT_EQ(ranked1.size(), 5u);
  int empty = 0;
  for (const auto& [step, line] : ranked1) {
    EXPECT_EQ(rank0.at(step)["weights_checksum"], line["weights_checksum"]) << step;
    if (line["rank_samples"] == 0) {
      ++empty;
      EXPECT_GT(line["episodes_masked"].get<int>(), 0) << line;
      EXPECT_EQ(rank0.at(step)["samples"], rank0.at(step)["rank_samples"]) << "rank 0 alone";
    }
  }
  EXPECT_GE(empty, 1) << "rank 1 never trained on an empty batch";
  std::printf("rank 1 trained on nothing at %d of 5 steps\n", empty);
  std::fflush(stdout);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// The demo config (configs/agent.yaml), shortened: SFT on the fix_repo
// task's built-in demonstrations, then GRPO episodes whose system prompt is
// the config's, without the tool schemas, each verified by the task's tests.
// A slip fraction on a task without a slip is refused, naming the key.
TEST_F(AgentTrainTest, SftTrainsOnDemonstrationsOfTheAgentTask) {
  TempDir dir;
  auto args = [&](const std::string& run, const std::string& kind) {
    return std::vector<std::string>{"train",
                                    "--config",
                                    LOOM_SOURCE_DIR "/configs/agent.yaml",
                                    "--run-dir",
                                    dir / run,
                                    "--set",
                                    "model.path=" + (dir / (run + "-model")),
                                    "--set",
                                    "train.sft.steps=3",
                                    "--set",
                                    "train.grpo.steps=1",
                                    "--set",
                                    "tasks.datasets[0].kind=" + kind};
  };
  testing::LoomProcess train(args("fix", "fix_repo"), dir / "fix.out");
  ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(dir / "fix.out");
  auto metrics = metrics::ReadMetrics(dir / "fix/metrics.jsonl");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  int sft_steps = 0, grpo_steps = 0;
  for (const Json& r : *metrics) {
    if (!r.contains("loss")) continue;
    if (r["stage"] == "sft") {
      ++sft_steps;
      EXPECT_GT(r["loss_tokens"].get<int64_t>(), 0) << r.dump();
    } else {
      ++grpo_steps;
      EXPECT_EQ(r["episodes_masked"], 0) << r.dump();
    }
  }
  EXPECT_EQ(sft_steps, 3);
  EXPECT_EQ(grpo_steps, 1);
  const std::vector<Json> records = testing::ReadJsonLines(dir / "fix/trajectories.jsonl");
  ASSERT_FALSE(records.empty());
  for (const Json& record : records) {
    const Json& t = record["trajectory"];
    EXPECT_EQ(t["messages"][0]["content"], "Use the tools, then answer.");
    EXPECT_EQ(t["messages"][0]["tools_json"], "");
    EXPECT_NE(t["messages"][1]["content"].get<std::string>().find("calc.py fails its unit test"),
              std::string::npos);
  }

  testing::LoomProcess refused(args("lookup", "lookup"), dir / "lookup.out");
  EXPECT_NE(refused.Wait(), 0);
  const std::string out = testing::ReadAll(dir / "lookup.out");
  EXPECT_NE(out.find("tasks.datasets[0].demonstration_slip_fraction: is only for the agentic "
                     "fix_repo task"),
            std::string::npos)
      << out;
}

// Agent tasks from files (configs/code.yaml, shortened): SFT on the shipped
// code tasks' reference solutions, then GRPO episodes on them. Every
// training episode is a training task of the file, asked with its own
// problem; held-out tasks run only in the evaluations, at the start and end
// of each stage; a task file with a broken line stops the run before it
// starts, naming the line.
TEST_F(AgentTrainTest, TaskFileTasksTrainThroughSftAndGrpo) {
  TempDir dir;
  auto args = [&](const std::string& run, const std::vector<std::string>& extra) {
    std::vector<std::string> a = {
        "train",
        "--config",
        LOOM_SOURCE_DIR "/configs/code.yaml",
        "--run-dir",
        dir / run,
        "--set",
        "model.path=" + (dir / (run + "-model")),
        "--set",
        "tasks.datasets[0].path=" LOOM_SOURCE_DIR "/configs/tasks/code-train.jsonl",
        "--set",
        "tasks.datasets[0].eval_path=" LOOM_SOURCE_DIR "/configs/tasks/code-eval.jsonl"};
    for (const char* s : {"train.sft.steps=2", "train.sft.batch_sequences=2", "train.grpo.steps=1",
                          "effort.samples_per_level=[2]", "async.max_inflight=4",
                          "async.batch_samples=4", "sandbox.max_turn_tokens=32",
                          "rollout.max_new_tokens=64", "tasks.datasets[0].eval_size=4"}) {
      a.insert(a.end(), {"--set", s});
    }
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  testing::LoomProcess train(args("code", {}), dir / "code.out");
  ASSERT_EQ(train.Wait(), 0) << testing::ReadAll(dir / "code.out");
  auto metrics = metrics::ReadMetrics(dir / "code/metrics.jsonl");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  int sft_steps = 0, grpo_steps = 0;
  std::vector<std::pair<std::string, int>> evaluated;  // (stage, step)
  for (const Json& r : *metrics) {
    if (r.contains("eval_agent_results")) {
      evaluated.emplace_back(r["stage"], r["step"]);
      ASSERT_EQ(r["eval_agent_results"].size(), 1u) << r.dump();
      const Json& row = r["eval_agent_results"][0];
      EXPECT_EQ(row["scaffold"], "builtin");
      EXPECT_EQ(row["tasks"], 4);  // eval_size of the 48 held out
      EXPECT_EQ(row["episodes"], 4);
      EXPECT_EQ(row["failures"], 0) << row.dump();
      EXPECT_GE(row["mean_turns"].get<double>(), 1.0) << row.dump();
      EXPECT_EQ(r["eval_agent_pass@1_by_dataset"]["code"], row["pass@1"]);
    }
    if (!r.contains("loss")) continue;
    if (r["stage"] == "sft") {
      ++sft_steps;
      EXPECT_GT(r["loss_tokens"].get<int64_t>(), 200) << r.dump();  // whole files are written
    } else {
      ++grpo_steps;
      EXPECT_EQ(r["episodes_masked"], 0) << r.dump();
    }
  }
  EXPECT_EQ(sft_steps, 2);
  EXPECT_EQ(grpo_steps, 1);
  EXPECT_EQ(evaluated,
            (std::vector<std::pair<std::string, int>>{{"sft", 0}, {"sft", 2}, {"grpo", 1}}));

  std::map<std::string, std::string> train_problems;
  std::set<std::string> held_out;
  for (const char* split : {"train", "eval"}) {
    std::ifstream in(LOOM_SOURCE_DIR "/configs/tasks/code-" + std::string(split) + ".jsonl");
    for (std::string line; std::getline(in, line);) {
      const Json task = Json::parse(line);
      if (std::string(split) == "train") {
        train_problems[task["id"]] = task["problem"];
      } else {
        held_out.insert(task["id"].get<std::string>());
      }
    }
  }
  const std::vector<Json> records = testing::ReadJsonLines(dir / "code/trajectories.jsonl");
  ASSERT_GE(records.size(), 4u);
  for (const Json& record : records) {
    const Json& t = record["trajectory"];
    const std::string id = t["task_id"];
    EXPECT_EQ(held_out.count(id), 0u) << id;
    ASSERT_EQ(train_problems.count(id), 1u) << id;
    EXPECT_EQ(t["messages"][1]["content"], train_problems[id]);
    EXPECT_FALSE(t["verdict"]["details"].get<std::string>().empty()) << t.dump();
  }

  const std::string broken = dir.Write("broken.jsonl", "{\"id\": \"x\", \"problem\": \"y\"}\n");
  testing::LoomProcess refused(args("broken", {"--set", "tasks.datasets[0].path=" + broken}),
                               dir / "broken.out");
  EXPECT_NE(refused.Wait(), 0);
  const std::string out = testing::ReadAll(dir / "broken.out");
  EXPECT_NE(out.find(broken + ":1: verification: is required"), std::string::npos) << out;
}

}  // namespace
}  // namespace loom
