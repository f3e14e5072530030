// `loom tasks reverify LEDGER|RUN_DIR --config F [--set k=v]... [--dataset D]
// [--json]`: judges the ledger's stored single-turn responses again with the
// verifiers of the config's file datasets as they are now (after a verifier
// or an answer key changed), and reports the attempts whose verdict flips.
// A task is found by its id (a JSONL line's `id`, else its file:line) in the
// dataset of the same name: its training lines and its held-out ones.
// Prints a line per task with flips and a summary; with --json the last line
// is {"attempts", "rejudged", "flipped_to_pass", "flipped_to_fail",
// "skipped": {reason: count}, "tasks": [{"dataset", "task_id",
// "attempts", "to_pass", "to_fail"}]}. Attempts it cannot judge again are
// counted by reason: agent tasks (their verdict comes from their workspace,
// which the ledger does not keep), generated problems (no file to read the
// verifier from), malformed responses (no answer to judge), no response
// stored (a schema-1 ledger), a task no longer in the file. Exit 2 for bad
// flags, a config or ledger that cannot be read.

#include <iostream>
#include <map>

#include "cli/command.h"
#include "loom/config/run_config.h"
#include "loom/tasks/dataset.h"
#include "loom/tasks/ledger.h"

namespace loom::cli {
namespace {

struct ReverifyFlags {
  std::string ledger;
  std::string config;
  std::vector<std::string> overrides;
  std::string dataset;
  bool json = false;
};

struct TaskFlips {
  int64_t attempts = 0, to_pass = 0, to_fail = 0;
};

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
  // (dataset, task id) -> the problem as the file has it now.
  std::map<std::pair<std::string, std::string>, tasks::Problem> now;
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

  std::map<std::string, int64_t> skipped;
  std::map<std::pair<std::string, std::string>, TaskFlips> flips;
  int64_t rejudged = 0, to_pass = 0, to_fail = 0;
  for (const tasks::LedgerAttempt& a : *attempts) {
    const auto kind = kinds.find(a.dataset);
    if (!a.harness.empty() || a.steps >= 0) {
      ++skipped["agent task: its workspace is not kept"];
    } else if (a.failure_kind == "infrastructure") {
      ++skipped["infrastructure failure"];
    } else if (a.failure_kind == "format") {
      ++skipped["malformed response"];
    } else if (kind == kinds.end()) {
      ++skipped["dataset not in the config"];
    } else if (kind->second != "jsonl") {
      ++skipped["generated problem"];
    } else if (a.response.empty()) {
      ++skipped["no response stored"];
    } else if (now.count({a.dataset, a.task_id}) == 0) {
      ++skipped["task no longer in the file"];
    } else {
      const bool passed = now.at({a.dataset, a.task_id}).Score(a.response) > 0.5;
      ++rejudged;
      TaskFlips& task = flips[{a.dataset, a.task_id}];
      ++task.attempts;
      if (passed && !a.passed) ++task.to_pass, ++to_pass;
      if (!passed && a.passed) ++task.to_fail, ++to_fail;
    }
  }

  nlohmann::json tasks_json = nlohmann::json::array();
  for (const auto& [key, task] : flips) {
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
  std::printf("%zu attempts, %lld judged again: %lld flip to pass, %lld to fail", attempts->size(),
              static_cast<long long>(rejudged), static_cast<long long>(to_pass),
              static_cast<long long>(to_fail));
  for (const auto& [reason, count] : skipped) {
    std::printf("; %lld not (%s)", static_cast<long long>(count), reason.c_str());
  }
  std::printf("\n");
  if (flags.json) {
    const nlohmann::json out = {{"attempts", attempts->size()}, {"rejudged", rejudged},
                                {"flipped_to_pass", to_pass},   {"flipped_to_fail", to_fail},
                                {"skipped", skipped},           {"tasks", tasks_json}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return kExitOk;
}

void SetupTasksReverify(CLI::App& app, Context& context) {
  CLI::App* group = GroupCommand(app, "tasks", "Work with agent task files and the task ledger");
  auto flags = std::make_shared<ReverifyFlags>();
  CLI::App* cmd = group->add_subcommand(
      "reverify", "Judge the ledger's stored responses again with the config's verifiers now");
  cmd->add_option("ledger", flags->ledger, "Task ledger file, or a run directory")->required();
  cmd->add_option("--config", flags->config, "Run config: its file datasets as they are now")
      ->required();
  cmd->add_option("--set", flags->overrides, "Override a config key: a.b.c=value (repeatable)");
  cmd->add_option("--dataset", flags->dataset, "Only this dataset's attempts");
  cmd->add_flag("--json", flags->json, "Print the result as JSON last");
  cmd->callback([flags, &context] { context.exit_code = RunReverify(*flags); });
}

}  // namespace

LOOM_REGISTER_COMMAND("tasks_reverify", SetupTasksReverify);

}  // namespace loom::cli
