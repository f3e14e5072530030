// `loom tasks calibrate --model DIR --config F [--set k=v]... [--datasets a,b]
// [--samples K] [--temperature T] [--band LO,HI] [--ledger FILE] --out DIR`:
// estimates each training task's pass rate with a model and writes the
// tasks inside a difficulty band. Every task of each selected file dataset
// (kinds jsonl and agent_jsonl) is asked K times at the config's top effort,
// sampled at the temperature: single-turn problems by the evaluator, agent
// tasks as episodes under the dataset's own scaffold on the config's sandbox
// workers. Infrastructure failures are left out of a task's estimate.
//
// Writes, per dataset, DIR/<dataset>.jsonl: the file's lines whose estimate
// lies in [LO, HI], unchanged but for an agent task's tag
// "pass_rate:<estimate>"; and DIR/<dataset>.calibration.jsonl: a line per
// task, {"id", "source", "pass_rate", "samples", "kept"}. With --ledger the
// samples go to that task ledger too. Exit 2 for bad flags or a dataset that
// is not a file, 1 when the model cannot be evaluated.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/command.h"
#include "cli/eval_model.h"
#include "cli/threads.h"
#include "loom/config/run_config.h"
#include "loom/rpc/sandbox_clients.h"
#include "loom/tasks/agent_jsonl.h"
#include "loom/tasks/dataset.h"
#include "loom/tasks/ledger.h"
#include "loom/train/agent_evaluator.h"
#include "loom/train/evaluator.h"

namespace loom::cli {
namespace {

struct CalibrateFlags {
  std::string model;
  std::string config;
  std::vector<std::string> overrides;
  std::vector<std::string> datasets;  // names; empty = every file dataset
  int samples = 8;
  double temperature = 1.0;
  std::vector<double> band = {0.1, 0.9};
  std::string ledger;
  std::string out;
  int threads = 0;
};

// The lines of `path`, numbered from 1 (cached per file).
const std::vector<std::string>& FileLines(const std::string& path,
                                          std::map<std::string, std::vector<std::string>>& cache) {
  auto [it, fresh] = cache.try_emplace(path);
  if (fresh) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) it->second.push_back(line);
  }
  return it->second;
}

// The file line a problem came from ("path:line").
std::string LineOfSource(const std::string& source,
                         std::map<std::string, std::vector<std::string>>& cache) {
  const size_t colon = source.rfind(':');
  if (colon == std::string::npos) return "";
  const std::vector<std::string>& lines = FileLines(source.substr(0, colon), cache);
  const size_t line = std::stoul(source.substr(colon + 1));
  return line >= 1 && line <= lines.size() ? lines[line - 1] : "";
}

int RunCalibrate(const CalibrateFlags& flags) {
  auto usage = [](const std::string& message) {
    std::cerr << "loom tasks calibrate: " << message << "\n";
    return kExitUsage;
  };
  auto fail = [](const absl::Status& status) {
    std::cerr << "loom tasks calibrate: " << status.message() << "\n";
    return kExitFailure;
  };
  if (flags.band.size() != 2 || flags.band[0] > flags.band[1]) {
    return usage("--band: give LO,HI with 0 <= LO <= HI <= 1");
  }
  auto config = config::LoadRunConfig(flags.config, flags.overrides);
  if (!config.ok()) return usage(std::string(config.status().message()));
  // The selected datasets hold their whole training file out: the
  // evaluator then asks every task of it.
  train::EvalOptions options;
  for (size_t d = 0; d < config->tasks.datasets.size(); ++d) {
    config::DatasetSection& dataset = config->tasks.datasets[d];
    const bool named = std::count(flags.datasets.begin(), flags.datasets.end(), dataset.name) > 0;
    if (!flags.datasets.empty() && !named) continue;
    if (dataset.kind != "jsonl" && dataset.kind != "agent_jsonl") {
      if (named)
        return usage("dataset '" + dataset.name + "' is not a file (kind " + dataset.kind + ")");
      continue;
    }
    dataset.eval_path = dataset.path;
    dataset.eval_size = 0;
    options.datasets.push_back(static_cast<int>(d));
  }
  if (options.datasets.size() < std::max<size_t>(1, flags.datasets.size())) {
    return usage(flags.datasets.empty()
                     ? "no dataset of kind jsonl or agent_jsonl in " + flags.config
                     : "--datasets names a dataset " + flags.config + " does not have");
  }
  options.samples = flags.samples;
  options.temperature = flags.temperature;
  options.efforts = {config->effort.levels.back()};
  std::vector<tasks::LedgerAttempt> attempts;
  options.attempts = &attempts;
  std::unique_ptr<tasks::TaskLedger> ledger;
  if (!flags.ledger.empty()) {
    auto opened = tasks::TaskLedger::Open(flags.ledger);
    if (!opened.ok()) return fail(opened.status());
    ledger = *std::move(opened);
  }
  std::error_code ec;
  std::filesystem::create_directories(flags.out, ec);
  if (ec) return fail(absl::UnavailableError("cannot create " + flags.out + ": " + ec.message()));

  if (flags.threads > 0) SetComputeThreads(flags.threads);
  auto loaded = LoadEvalModel(flags.model, *config);
  if (!loaded.ok()) return fail(loaded.status());
  auto datasets = tasks::LoadDatasets(config->tasks, static_cast<uint64_t>(config->run.seed));
  if (!datasets.ok()) return usage(std::string(datasets.status().message()));
  const train::EvalInputs inputs{*config, *loaded->tokenizer, *datasets, loaded->special};
  if (auto single = train::Evaluate(inputs, *loaded->model, options); !single.ok()) {
    return fail(single.status());
  }
  std::optional<rpc::SandboxClients> clients;
  for (int d : options.datasets) {
    const config::DatasetSection& dataset = config->tasks.datasets[d];
    if (dataset.environment != "sandbox") continue;
    if (!clients) {
      auto started = rpc::StartSandboxClients(config->sandbox);
      if (!started.ok()) return fail(started.status());
      clients = *std::move(started);
    }
    auto scaffold = train::DatasetScaffold(dataset, loaded->model->config().max_position_embeddings,
                                           config->rollout.max_new_tokens);
    if (!scaffold.ok()) return usage(std::string(scaffold.status().message()));
    train::EvalOptions one = options;
    one.datasets = {d};
    auto episodes =
        train::EvaluateAgentTasks(inputs, *loaded->model, one, *clients->pool, {*scaffold});
    if (!episodes.ok()) return fail(episodes.status());
  }
  if (ledger != nullptr) {
    for (tasks::LedgerAttempt& a : attempts) {
      a.split = "calibrate";
      a.run_id = "loom tasks calibrate " + flags.model;
    }
    if (absl::Status s = ledger->Append(attempts); !s.ok()) return fail(s);
  }

  // (dataset, task id) -> (passes, counted samples)
  std::map<std::pair<std::string, std::string>, std::pair<int, int>> tally;
  for (const tasks::LedgerAttempt& a : attempts) {
    if (a.failure_kind == "infrastructure") continue;
    auto& [passes, counted] = tally[{a.dataset, a.task_id}];
    passes += a.passed ? 1 : 0;
    ++counted;
  }
  std::map<std::string, std::vector<std::string>> files;
  for (int d : options.datasets) {
    const std::string& name = config->tasks.datasets[d].name;
    std::ofstream kept_file(flags.out + "/" + name + ".jsonl");
    std::ofstream estimates(flags.out + "/" + name + ".calibration.jsonl");
    int tasks = 0, kept = 0, unknown = 0;
    for (const tasks::Problem& problem : (*datasets)[d]->Eval()) {
      const bool agent = problem.agent_task != nullptr;
      const std::string id = problem.TaskId();
      const std::string source = agent ? problem.agent_task->source : problem.source;
      const auto found = tally.find({name, id});
      ++tasks;
      if (found == tally.end() || found->second.second == 0) {
        ++unknown;  // every sample failed for the infrastructure: nothing known
        estimates << nlohmann::json({{"id", id},
                                     {"source", source},
                                     {"pass_rate", nullptr},
                                     {"samples", 0},
                                     {"kept", false}})
                         .dump()
                  << "\n";
        continue;
      }
      const double rate = static_cast<double>(found->second.first) / found->second.second;
      const bool keep = rate >= flags.band[0] && rate <= flags.band[1];
      estimates << nlohmann::json({{"id", id},
                                   {"source", source},
                                   {"pass_rate", rate},
                                   {"samples", found->second.second},
                                   {"kept", keep}})
                       .dump()
                << "\n";
      if (!keep) continue;
      ++kept;
      std::string line = LineOfSource(source, files);
      if (agent) {
        nlohmann::json task = nlohmann::json::parse(line);
        char tag[32];
        std::snprintf(tag, sizeof tag, "pass_rate:%.3f", rate);
        task["tags"].push_back(tag);
        line = task.dump();
      }
      kept_file << line << "\n";
    }
    if (!kept_file || !estimates) {
      return fail(absl::UnavailableError("cannot write under " + flags.out));
    }
    std::printf(
        "%s: %d tasks, %d kept with pass rate in [%.2f, %.2f] (%d samples each), %d "
        "unknown -> %s/%s.jsonl\n",
        name.c_str(), tasks, kept, flags.band[0], flags.band[1], flags.samples, unknown,
        flags.out.c_str(), name.c_str());
  }
  return kExitOk;
}

void SetupTasksCalibrate(CLI::App& app, Context& context) {
  CLI::App* group = GroupCommand(app, "tasks", "Work with agent task files and the task ledger");
  auto flags = std::make_shared<CalibrateFlags>();
  CLI::App* cmd = group->add_subcommand(
      "calibrate", "Estimate each training task's pass rate with a model; keep a difficulty band");
  cmd->add_option("--model", flags->model, "Model directory")->required();
  cmd->add_option("--config", flags->config, "Run config: its file datasets and settings")
      ->required();
  cmd->add_option("--set", flags->overrides, "Override a config key: a.b.c=value (repeatable)");
  cmd->add_option("--datasets", flags->datasets, "Dataset names (default: every file dataset)")
      ->delimiter(',');
  cmd->add_option("--samples", flags->samples, "Samples per task")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--temperature", flags->temperature, "Sampling temperature")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  cmd->add_option("--band", flags->band, "LO,HI: the pass rates kept")
      ->delimiter(',')
      ->expected(2)
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--ledger", flags->ledger, "Also record every sample in this task ledger");
  cmd->add_option("--out", flags->out, "Directory for <dataset>.jsonl and its estimates")
      ->required();
  cmd->add_option("--threads", flags->threads, "Intra-op threads (0 = the config's)");
  cmd->callback([flags, &context] { context.exit_code = RunCalibrate(*flags); });
}

}  // namespace

LOOM_REGISTER_COMMAND("tasks_calibrate", SetupTasksCalibrate);

}  // namespace loom::cli
