// `loom eval --model DIR --config F [--set k=v]... [--datasets a,b] [--efforts 25,50,max]
// [--samples K] [--temperature T] [--scaffolds builtin,pi,...] [--harness NAME=CMD]...
// [--json] [--save RUN_DIR] [--ledger FILE]`: held-out evaluation of any model on a
// config's datasets at chosen efforts — the code path training evaluates with.
// Held-out agent tasks (sandbox datasets of kind agent_jsonl) run as episodes
// on the config's sandbox workers under each scaffold: the built-in loop or
// an external harness (loom/train/agent_evaluator.h), in a second table. A table on stdout; with
// --json the last line is {"results": [...], "agent_results": [...]} (the latter only with agent
// tasks); with --save RUN_DIR the same line, with the model and config, is appended to
// RUN_DIR/evaluations.jsonl for `loom report`; with --ledger every evaluated
// sample goes to that task ledger (split eval). Exit 2 for a bad config, dataset or effort, 1 when
// the model cannot be evaluated.

#include <ATen/Parallel.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "cli/eval_model.h"
#include "cli/threads.h"
#include "loom/chat/encoder.h"
#include "loom/config/run_config.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/metrics/report.h"
#include "loom/rpc/sandbox_clients.h"
#include "loom/tasks/dataset.h"
#include "loom/tasks/ledger.h"
#include "loom/train/agent_evaluator.h"
#include "loom/train/evaluator.h"

namespace loom::cli {
namespace {

struct EvalFlags {
  std::string model;
  std::string config;
  std::vector<std::string> overrides;
  std::string datasets;  // comma-separated names; "" = all
  std::string efforts;   // comma-separated; "" = the config's training levels
  int samples = 1;
  double temperature = 1.0;
  bool json = false;
  std::string save;  // a run directory: the results are appended to its evaluations.jsonl
  int threads = 0;
  std::string scaffolds = "builtin";   // comma-separated: builtin, a built-in harness, a --harness
  std::vector<std::string> harnesses;  // NAME=COMMAND
  std::string ledger;  // a task ledger: every evaluated sample is appended as an attempt
};

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// An effort: 1..100 or a tier name (the chat encoder's parser: numeric efforts only).
absl::StatusOr<int> ParseEffort(const std::string& text) {
  auto effort = chat::ParseReasoningEffort(text);
  if (!effort.ok() || effort->kind != chat::ReasoningEffort::Kind::kNumeric) {
    return absl::InvalidArgumentError("--efforts: '" + text +
                                      "' is not an effort (1..100, max, high or low)");
  }
  return effort->b;
}

absl::StatusOr<train::EvalOptions> Options(const EvalFlags& flags,
                                           const config::RunConfig& config) {
  train::EvalOptions options;
  options.samples = flags.samples;
  options.temperature = flags.temperature;
  for (const std::string& name : SplitCommas(flags.datasets)) {
    std::string known;
    int index = -1;
    for (size_t d = 0; d < config.tasks.datasets.size(); ++d) {
      if (config.tasks.datasets[d].name == name) index = static_cast<int>(d);
      known += (known.empty() ? "" : ", ") + config.tasks.datasets[d].name;
    }
    if (index < 0) {
      return absl::InvalidArgumentError("--datasets: no dataset '" + name + "' in " + flags.config +
                                        " (it has: " + known + ")");
    }
    options.datasets.push_back(index);
  }
  for (const std::string& text : SplitCommas(flags.efforts)) {
    auto effort = ParseEffort(text);
    if (!effort.ok()) return effort.status();
    options.efforts.push_back(*effort);
  }
  return options;
}

// The scaffolds --scaffolds names: the built-in loop, built-in harnesses
// (set up for the model's context and the config's turn length) and the
// --harness commands.
absl::StatusOr<std::vector<train::AgentScaffold>> Scaffolds(const EvalFlags& flags,
                                                            const config::RunConfig& config,
                                                            int64_t context_window) {
  std::map<std::string, std::string> commands;
  for (const std::string& harness : flags.harnesses) {
    const size_t eq = harness.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == harness.size()) {
      return absl::InvalidArgumentError("--harness: '" + harness + "' is not NAME=COMMAND");
    }
    commands[harness.substr(0, eq)] = harness.substr(eq + 1);
  }
  std::vector<train::AgentScaffold> scaffolds;
  for (const std::string& name : SplitCommas(flags.scaffolds)) {
    train::AgentScaffold& scaffold = scaffolds.emplace_back();
    scaffold.name = name;
    if (name == "builtin") continue;
    if (auto it = commands.find(name); it != commands.end()) {
      scaffold.harness = agent::CommandHarness(name, it->second);
      continue;
    }
    auto harness = agent::BuiltinHarness(name, context_window, config.rollout.max_new_tokens);
    if (!harness.ok()) {
      return absl::InvalidArgumentError("--scaffolds: " + std::string(harness.status().message()));
    }
    scaffold.harness = *std::move(harness);
  }
  if (scaffolds.empty()) return absl::InvalidArgumentError("--scaffolds: none named");
  return scaffolds;
}

// "0.516±0.021", or "+0.110±0.015" with `sign`.
std::string WithError(double value, double error, bool sign) {
  char text[48];
  std::snprintf(text, sizeof(text), sign ? "%+.3f±%.3f" : "%.3f±%.3f", value, error);
  return text;
}

void PrintTable(const train::EvalResult& result, int samples) {
  std::printf("%-16s %6s %8s %-12s %-18s %7s %10s %9s %6s\n", "dataset", "effort", "problems",
              "pass@1", "change", ("pass@" + std::to_string(samples)).c_str(), "reasoning",
              "response", "parse");
  for (const train::EvalCell& c : result.cells) {
    const std::string change =
        c.change_from == 0 ? ""
                           : WithError(c.pass_at_1_change, c.pass_at_1_change_stderr, true) +
                                 " vs " + std::to_string(c.change_from);
    // One byte wider than the header's columns: "±" is two bytes in UTF-8.
    std::printf("%-16s %6d %8lld %-13s %-19s %7.3f %10.1f %9.1f %6.3f\n", c.dataset.c_str(),
                c.effort, static_cast<long long>(c.problems),
                WithError(c.pass_at_1, c.pass_at_1_stderr, false).c_str(), change.c_str(),
                c.pass_at_k, c.mean_reasoning_tokens, c.mean_response_tokens, c.parse_rate);
  }
  std::printf(
      "± one standard error over the problems; change: paired by problem, against the "
      "next lower effort\n");
}

void PrintAgentTable(const std::vector<train::AgentEvalCell>& cells, int samples) {
  std::printf("%-16s %-12s %6s %6s %8s %-12s %7s %6s %8s %7s %s\n", "dataset", "scaffold", "effort",
              "tasks", "episodes", "pass@1", ("pass@" + std::to_string(samples)).c_str(), "turns",
              "tokens", "format", "failures");
  for (const train::AgentEvalCell& c : cells) {
    std::string failures = std::to_string(c.failures);
    for (const auto& [cause, count] : c.failures_by_cause) {
      failures += " " + cause + ":" + std::to_string(count);
    }
    std::printf("%-16s %-12s %6d %6lld %8lld %-13s %7.3f %6.2f %8.1f %7.3f %s\n", c.dataset.c_str(),
                c.scaffold.c_str(), c.effort, static_cast<long long>(c.tasks),
                static_cast<long long>(c.episodes),
                WithError(c.pass_at_1, c.pass_at_1_stderr, false).c_str(), c.pass_at_k,
                c.mean_turns, c.mean_tokens, c.format_error_rate, failures.c_str());
  }
  std::printf(
      "agent tasks: episodes on sandbox workers; failures (the infrastructure's or the "
      "harness's own) are left out of pass@1 and pass@K\n");
}

// Whether the evaluation runs agent episodes: a selected sandbox dataset
// holds tasks out.
bool HasAgentTasks(const config::RunConfig& config,
                   const std::vector<std::unique_ptr<tasks::Dataset>>& datasets,
                   const train::EvalOptions& options) {
  for (size_t d = 0; d < datasets.size(); ++d) {
    const bool selected =
        options.datasets.empty() ||
        std::count(options.datasets.begin(), options.datasets.end(), static_cast<int>(d)) > 0;
    if (selected && config.tasks.datasets[d].environment == "sandbox" &&
        !datasets[d]->Eval().empty()) {
      return true;
    }
  }
  return false;
}

nlohmann::json Json(const train::EvalResult& result) {
  nlohmann::json results = nlohmann::json::array();
  for (const train::EvalCell& c : result.cells) {
    nlohmann::json row = {{"dataset", c.dataset},
                          {"effort", c.effort},
                          {"problems", c.problems},
                          {"pass@1", c.pass_at_1},
                          {"pass@1_stderr", c.pass_at_1_stderr},
                          {"pass@K", c.pass_at_k},
                          {"mean_reasoning_tokens", c.mean_reasoning_tokens},
                          {"mean_response_tokens", c.mean_response_tokens},
                          {"parse_rate", c.parse_rate}};
    if (c.change_from != 0) {
      row["pass@1_change"] = {{"from_effort", c.change_from},
                              {"diff", c.pass_at_1_change},
                              {"stderr", c.pass_at_1_change_stderr}};
    }
    results.push_back(row);
  }
  return {{"results", results}};
}

int RunEval(const EvalFlags& flags) {
  auto config = config::LoadRunConfig(flags.config, flags.overrides);
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    return kExitUsage;
  }
  auto options = Options(flags, *config);
  if (!options.ok()) {
    std::cerr << "loom eval: " << options.status().message() << "\n";
    return kExitUsage;
  }
  if (flags.threads > 0) SetComputeThreads(flags.threads);
  auto fail = [](const absl::Status& status) {
    std::cerr << "loom eval: " << status.message() << "\n";
    return kExitFailure;
  };
  auto loaded = LoadEvalModel(flags.model, *config);
  if (!loaded.ok()) return fail(loaded.status());
  auto datasets = tasks::LoadDatasets(config->tasks, static_cast<uint64_t>(config->run.seed));
  if (!datasets.ok()) return fail(datasets.status());
  const train::EvalInputs inputs{*config, *loaded->tokenizer, *datasets, loaded->special};
  std::unique_ptr<tasks::TaskLedger> ledger;  // opened first: a bad ledger costs no evaluation
  std::vector<tasks::LedgerAttempt> attempts;
  if (!flags.ledger.empty()) {
    auto opened = tasks::TaskLedger::Open(flags.ledger);
    if (!opened.ok()) return fail(opened.status());
    ledger = *std::move(opened);
    options->attempts = &attempts;
  }
  auto result = train::Evaluate(inputs, *loaded->model, *options);
  if (!result.ok()) return fail(result.status());
  if (!result->cells.empty()) PrintTable(*result, std::max(1, flags.samples));
  nlohmann::json json = Json(*result);
  if (HasAgentTasks(*config, *datasets, *options)) {
    auto scaffolds = Scaffolds(flags, *config, loaded->model->config().max_position_embeddings);
    if (!scaffolds.ok()) {
      std::cerr << "loom eval: " << scaffolds.status().message() << "\n";
      return kExitUsage;
    }
    auto clients = rpc::StartSandboxClients(config->sandbox);
    if (!clients.ok()) return fail(clients.status());
    auto agent =
        train::EvaluateAgentTasks(inputs, *loaded->model, *options, *clients->pool, *scaffolds);
    if (!agent.ok()) return fail(agent.status());
    PrintAgentTable(*agent, std::max(1, flags.samples));
    json["agent_results"] = train::AgentCellsJson(*agent);
  }
  if (ledger != nullptr) {
    for (tasks::LedgerAttempt& a : attempts) {
      a.run_id = "loom eval " + flags.model;
    }
    if (absl::Status s = ledger->Append(attempts); !s.ok()) return fail(s);
  }
  if (flags.json) std::cout << json.dump() << "\n";
  if (!flags.save.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(flags.save, ec);
    auto log = metrics::MetricsWriter::Open(flags.save + "/" + metrics::kEvaluationsFile);
    if (!log.ok()) return fail(log.status());
    json["model"] = flags.model;
    json["config"] = flags.config;
    if (absl::Status s = log->Write(json); !s.ok()) return fail(s);
  }
  return kExitOk;
}

void SetupEval(CLI::App& app, Context& context) {
  auto flags = std::make_shared<EvalFlags>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Evaluate a model on a config's held-out problems per dataset and effort");
  cmd->add_option("--model", flags->model, "Model directory (config.json, weights, tokenizer.json)")
      ->required();
  cmd->add_option("--config", flags->config,
                  "Run config: its datasets, rollout and effort settings")
      ->required();
  cmd->add_option("--set", flags->overrides, "Override a config key: a.b.c=value (repeatable)");
  cmd->add_option("--datasets", flags->datasets, "Comma-separated dataset names (default: all)");
  cmd->add_option("--efforts", flags->efforts,
                  "Comma-separated efforts: 1..100, max (100), high (75), low (50) "
                  "(default: effort.levels)");
  cmd->add_option("--samples", flags->samples, "K samples per problem (1: greedy)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--temperature", flags->temperature, "Sampling temperature when K > 1")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_flag("--json", flags->json, "Also print the results as one JSON line");
  cmd->add_option("--save", flags->save,
                  "Also append the results, as one JSON line, to RUN_DIR/evaluations.jsonl, "
                  "which `loom report RUN_DIR` shows as tables");
  cmd->add_option("--ledger", flags->ledger,
                  "Also append every evaluated sample to this task ledger (`loom tasks stats`, "
                  "`loom tasks audit`)");
  cmd->add_option("--scaffolds", flags->scaffolds,
                  "Agent tasks: comma-separated scaffolds, builtin (loom's loop), pi, claude-code, "
                  "codex, opencode (sandbox.harness_dir must hold them) or a --harness name")
      ->capture_default_str();
  cmd->add_option("--harness", flags->harnesses,
                  "Agent tasks: a harness NAME=COMMAND (bash run as the episode's main process, "
                  "the problem in $LOOM_PROBLEM, its endpoint in OPENAI_BASE_URL / "
                  "ANTHROPIC_BASE_URL); repeatable");
  cmd->add_option("--threads", flags->threads, "Intra-op threads (default: LibTorch's)");
  cmd->callback([flags, &context] { context.exit_code = RunEval(*flags); });
}

}  // namespace

LOOM_REGISTER_COMMAND("eval", SetupEval);

}  // namespace loom::cli
