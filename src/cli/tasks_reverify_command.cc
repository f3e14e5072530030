// `loom tasks reverify LEDGER|RUN_DIR --config F [--set k=v]... [--dataset D]
// [--jobs N] [--json]`: judges the ledger's stored single-turn responses
// again with the verifiers of the config's file datasets as they are now
// (after a verifier or an answer key changed), and reports the attempts
// whose verdict flips. A task is found by its id (a JSONL line's `id`, else
// its file:line) in the dataset of the same name: its training lines and its
// held-out ones.
//
// Given a run directory, its agent episodes of the built-in loop are
// re-verified too, from trajectories.jsonl: each episode's tool calls are
// replayed in a fresh sandbox (the config's `sandbox:` workers, N at once)
// against the task as its agent_jsonl file has it now, and the replay's
// verdict is compared with the episode's. The ledger's agent attempts are
// then left to the trajectories.
//
// Prints a line per task with flips and a summary; with --json the last line
// is {"attempts", "rejudged", "flipped_to_pass", "flipped_to_fail",
// "skipped": {reason: count}, "tasks": [{"dataset", "task_id",
// "attempts", "to_pass", "to_fail"}]}. Attempts it cannot judge again are
// counted by reason: agent tasks without their trajectories (a ledger
// alone), episodes of an external harness (its tool calls ran inside the
// harness, out of loom's sight), replays that took another number of steps
// than the episode (the replay diverged), generated problems (no file to
// read the verifier from), malformed responses (no answer to judge), no
// response stored (a schema-1 ledger), a task no longer in the file, and
// infrastructure failures, the episode's or the replay's. Exit 2 for bad
// flags, a config, ledger or trajectory file that cannot be read; 1 when
// the workers cannot start.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "cli/command.h"
#include "loom/agent/episode_record.h"
#include "loom/agent/task_check.h"
#include "loom/base/parallel.h"
#include "loom/config/run_config.h"
#include "loom/rpc/sandbox_clients.h"
#include "loom/tasks/dataset.h"
#include "loom/tasks/ledger.h"

namespace loom::cli {
namespace {

struct ReverifyFlags {
  std::string ledger;
  std::string config;
  std::vector<std::string> overrides;
  std::string dataset;
  int jobs = 4;
  bool json = false;
};

struct TaskFlips {
  int64_t attempts = 0, to_pass = 0, to_fail = 0;
};

// What reverify found, over the ledger's attempts and the replayed episodes.
struct Outcome {
  int64_t attempts = 0, rejudged = 0, to_pass = 0, to_fail = 0;
  std::map<std::string, int64_t> skipped;                          // by reason
  std::map<std::pair<std::string, std::string>, TaskFlips> flips;  // by (dataset, task id)

  void Skip(const std::string& reason) {
    ++attempts;
    ++skipped[reason];
  }
  void Judged(const std::string& dataset, const std::string& task_id, bool was, bool now) {
    ++attempts;
    ++rejudged;
    TaskFlips& task = flips[{dataset, task_id}];
    ++task.attempts;
    if (now && !was) ++task.to_pass, ++to_pass;
    if (!now && was) ++task.to_fail, ++to_fail;
  }
};

// (dataset, task id) -> the problem as its file has it now.
using ProblemsNow = std::map<std::pair<std::string, std::string>, tasks::Problem>;

// Re-verifies the built-in loop's episodes of `path` (a trajectories.jsonl)
// by replaying them (agent::ReplayEpisode) against the agent tasks of `now`,
// `jobs` at once.
absl::Status ReplayTrajectories(const std::string& path, const config::RunConfig& config,
                                const ProblemsNow& now,
                                const std::map<std::string, std::string>& kinds,
                                const ReverifyFlags& flags, Outcome& outcome) {
  struct Episode {
    std::string dataset;
    v1::Trajectory trajectory;
    const tasks::AgentTask* task;
  };
  std::vector<Episode> episodes;
  std::ifstream in(path);
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const std::string where = path + ":" + std::to_string(line_number);
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_object() || !record.contains("trajectory") ||
        !record.value("dataset", nlohmann::json()).is_string()) {
      return absl::InvalidArgumentError(where + ": not a trajectory line");
    }
    const std::string dataset = record["dataset"];
    if (!flags.dataset.empty() && dataset != flags.dataset) continue;
    if (record.contains("sequences")) {
      outcome.Skip("episode of an external harness");
      continue;
    }
    auto trajectory = agent::TrajectoryFromJson(record["trajectory"], where);
    if (!trajectory.ok()) return absl::InvalidArgumentError(trajectory.status().message());
    const auto task = now.find({dataset, trajectory->task_id()});
    const auto kind = kinds.find(dataset);
    if (trajectory->penalty()) {
      outcome.Skip("infrastructure failure");
    } else if (kind == kinds.end()) {
      outcome.Skip("dataset not in the config");
    } else if (kind->second != "agent_jsonl") {
      outcome.Skip("generated problem");
    } else if (task == now.end() || task->second.agent_task == nullptr) {
      outcome.Skip("task no longer in the file");
    } else {
      episodes.push_back({dataset, *std::move(trajectory), task->second.agent_task.get()});
    }
  }
  if (episodes.empty()) return absl::OkStatus();

  auto clients = rpc::StartSandboxClients(config.sandbox);
  if (!clients.ok()) return clients.status();
  const v1::ScaffoldOptions options = rpc::ScaffoldOptionsFrom(config.sandbox);
  std::vector<v1::Trajectory> replays(episodes.size());
  ParallelFor(episodes.size(), static_cast<size_t>(std::max(1, flags.jobs)), [&](size_t i) {
    replays[i] =
        agent::ReplayEpisode(*clients->pool, *episodes[i].task, options, episodes[i].trajectory);
  });
  for (size_t i = 0; i < episodes.size(); ++i) {
    const v1::Trajectory& was = episodes[i].trajectory;
    if (replays[i].penalty()) {
      outcome.Skip("infrastructure failure on replay");
    } else if (replays[i].steps() != was.steps()) {
      outcome.Skip("replay diverged (another number of steps)");
    } else {
      outcome.Judged(episodes[i].dataset, was.task_id(), was.verdict().passed(),
                     replays[i].verdict().passed());
    }
  }
  return absl::OkStatus();
}

int RunReverify(const ReverifyFlags& flags) {
  auto config = config::LoadRunConfig(flags.config, flags.overrides);
  if (!config.ok()) {
    std::cerr << "loom tasks reverify: " << config.status().message() << "\n";
    return kExitUsage;
  }
  auto datasets = tasks::LoadDatasets(config->tasks, static_cast<uint64_t>(config->run.seed));
  if (!datasets.ok()) {
    std::cerr << "loom tasks reverify: " << datasets.status().message() << "\n";
    return kExitUsage;
  }
  ProblemsNow now;
  std::map<std::string, std::string> kinds;  // dataset -> kind
  for (size_t d = 0; d < datasets->size(); ++d) {
    const tasks::Dataset& dataset = *(*datasets)[d];
    kinds[dataset.name()] = config->tasks.datasets[d].kind;
    for (uint64_t i = 0; i < dataset.TrainSize(); ++i) {
      tasks::Problem problem = dataset.Train(i);
      now.emplace(std::make_pair(dataset.name(), problem.TaskId()), std::move(problem));
    }
    for (const tasks::Problem& problem : dataset.Eval()) {
      now.emplace(std::make_pair(dataset.name(), problem.TaskId()), problem);
    }
  }
  auto attempts = tasks::ReadLedgerAt(flags.ledger, flags.dataset);
  if (!attempts.ok()) {
    std::cerr << "loom tasks reverify: " << attempts.status().message() << "\n";
    return kExitUsage;
  }

  const std::string trajectories = flags.ledger + "/trajectories.jsonl";
  const bool replay =
      std::filesystem::is_directory(flags.ledger) && std::filesystem::exists(trajectories);
  Outcome outcome;
  for (const tasks::LedgerAttempt& a : *attempts) {
    const auto kind = kinds.find(a.dataset);
    if (!a.harness.empty() || a.steps >= 0) {
      // Replayed from the run's trajectories, when it has them.
      if (!replay) outcome.Skip("agent task without its run's trajectories");
    } else if (a.failure_kind == "infrastructure") {
      outcome.Skip("infrastructure failure");
    } else if (a.failure_kind == "format") {
      outcome.Skip("malformed response");
    } else if (kind == kinds.end()) {
      outcome.Skip("dataset not in the config");
    } else if (kind->second != "jsonl") {
      outcome.Skip("generated problem");
    } else if (a.response.empty()) {
      outcome.Skip("no response stored");
    } else if (now.count({a.dataset, a.task_id}) == 0) {
      outcome.Skip("task no longer in the file");
    } else {
      outcome.Judged(a.dataset, a.task_id, a.passed,
                     now.at({a.dataset, a.task_id}).Score(a.response) > 0.5);
    }
  }
  if (replay) {
    if (absl::Status s = ReplayTrajectories(trajectories, *config, now, kinds, flags, outcome);
        !s.ok()) {
      std::cerr << "loom tasks reverify: " << s.message() << "\n";
      return s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
    }
  }

  nlohmann::json tasks_json = nlohmann::json::array();
  for (const auto& [key, task] : outcome.flips) {
    if (task.to_pass + task.to_fail == 0) continue;
    std::printf("%-16s %-24s %lld of %lld attempts flip: %lld to pass, %lld to fail\n",
                key.first.c_str(), key.second.c_str(),
                static_cast<long long>(task.to_pass + task.to_fail),
                static_cast<long long>(task.attempts), static_cast<long long>(task.to_pass),
                static_cast<long long>(task.to_fail));
    tasks_json.push_back({{"dataset", key.first},
                          {"task_id", key.second},
                          {"attempts", task.attempts},
                          {"to_pass", task.to_pass},
                          {"to_fail", task.to_fail}});
  }
  std::printf("%lld attempts, %lld judged again: %lld flip to pass, %lld to fail",
              static_cast<long long>(outcome.attempts), static_cast<long long>(outcome.rejudged),
              static_cast<long long>(outcome.to_pass), static_cast<long long>(outcome.to_fail));
  for (const auto& [reason, count] : outcome.skipped) {
    std::printf("; %lld not (%s)", static_cast<long long>(count), reason.c_str());
  }
  std::printf("\n");
  if (flags.json) {
    const nlohmann::json out = {
        {"attempts", outcome.attempts},       {"rejudged", outcome.rejudged},
        {"flipped_to_pass", outcome.to_pass}, {"flipped_to_fail", outcome.to_fail},
        {"skipped", outcome.skipped},         {"tasks", tasks_json}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return kExitOk;
}

void SetupTasksReverify(CLI::App& app, Context& context) {
  CLI::App* group = GroupCommand(app, "tasks", "Work with agent task files and the task ledger");
  auto flags = std::make_shared<ReverifyFlags>();
  CLI::App* cmd = group->add_subcommand(
      "reverify",
      "Judge the ledger's stored responses, and a run's agent episodes, again with the config's "
      "verifiers now");
  cmd->add_option("ledger", flags->ledger, "Task ledger file, or a run directory")->required();
  cmd->add_option("--config", flags->config, "Run config: its file datasets as they are now")
      ->required();
  cmd->add_option("--set", flags->overrides, "Override a config key: a.b.c=value (repeatable)");
  cmd->add_option("--dataset", flags->dataset, "Only this dataset's attempts");
  cmd->add_option("--jobs", flags->jobs, "Agent episodes replayed at once")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--json", flags->json, "Print the result as JSON last");
  cmd->callback([flags, &context] { context.exit_code = RunReverify(*flags); });
}

}  // namespace

LOOM_REGISTER_COMMAND("tasks_reverify", SetupTasksReverify);

}  // namespace loom::cli
