// `loom bench scaffold [--tasks FILE] [--episodes N] [--sessions S]
// [--harness-dir DIR] [--threads T]`: agent episodes per second on the same
// tasks and model under the built-in loop and under Pi (from npm, in the
// sandbox, through the endpoint), S episodes at once on 2 local workers,
// side by side in one run; and, apart, what a harness's start costs: Pi
// started and stopped at once (`pi --version`) against an empty command, one
// episode at a time. The model is a fresh random Llama of 0.11M parameters
// (context 16384, byte tokens): what is measured is the loop around the
// model, not the model. JSON on the last line.

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench/bench_util.h"
#include "cli/bench_json.h"
#include "loom/chat/special_tokens.h"
#include "loom/config/files.h"
#include "loom/config/run_config.h"
#include "loom/model/init.h"
#include "loom/model/transformer.h"
#include "loom/rpc/sandbox_clients.h"
#include "loom/tasks/dataset.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/train/agent_evaluator.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

struct ScaffoldBenchFlags {
  std::string tasks = "configs/tasks/code-eval.jsonl";
  int episodes = 32;
  int sessions = 16;
  std::string harness_dir = "third_party/npm";
  int threads = 0;
};

// The first `n` lines of `path`, written to `out`.
absl::Status FirstLines(const std::string& path, int n, const std::string& out) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::istringstream in(*text);
  std::ofstream file(out);
  int kept = 0;
  for (std::string line; kept < n && std::getline(in, line);) {
    if (line.empty()) continue;
    file << line << "\n";
    ++kept;
  }
  if (kept < n) {
    return absl::InvalidArgumentError(path + " has " + std::to_string(kept) + " tasks, not " +
                                      std::to_string(n));
  }
  return absl::OkStatus();
}

// The run config of the benchmark: every task of `tasks` held out (and
// trained on, which nothing does here), `sessions` episodes at once.
std::string ConfigYaml(const std::string& model, const std::string& tasks,
                       const ScaffoldBenchFlags& flags) {
  std::ostringstream yaml;
  yaml << "run: {name: bench-scaffold, seed: 1, threads: 2}\n"
       << "model: {path: " << model << "}\n"
       << "tasks:\n  eval_every: 0\n  datasets:\n"
       << "    - {name: code, kind: agent_jsonl, environment: sandbox, path: " << tasks
       << ", eval_path: " << tasks << "}\n"
       << "effort: {levels: [100], samples_per_level: [1], in_prompt: false}\n"
       << "rollout: {max_batch: 64, max_new_tokens: 64}\n"
       << "async: {max_inflight: " << flags.sessions << "}\n"
       << "sandbox: {local: 2, local_max_sandboxes: " << flags.sessions
       << ", max_steps: 3, max_turn_tokens: 32, max_time_s: 120, tool_timeout_s: 10, "
       << "harness_dir: " << fs::absolute(flags.harness_dir).string() << "}\n";
  return yaml.str();
}

absl::StatusOr<nlohmann::json> RunScaffoldBench(const ScaffoldBenchFlags& flags) {
  double load[1] = {0};
  ::getloadavg(load, 1);
  bench::ScratchDir scratch("scaffold");
  if (scratch.path().empty()) return absl::InternalError("no scratch directory");
  const std::string model_dir = scratch.path() + "/model";
  model::InitModelOptions init;
  init.out_dir = model_dir;
  init.seed = 1;
  init.overrides = {"hidden_size=64", "num_hidden_layers=2", "max_position_embeddings=16384"};
  if (absl::Status s = model::InitModelDir(init); !s.ok()) return s;
  const std::string tasks = scratch.path() + "/tasks.jsonl";
  if (absl::Status s = FirstLines(flags.tasks, flags.episodes, tasks); !s.ok()) return s;
  const std::string config_path = scratch.path() + "/bench.yaml";
  std::ofstream(config_path) << ConfigYaml(model_dir, tasks, flags);
  auto config = config::LoadRunConfig(config_path, {});
  if (!config.ok()) return config.status();
  auto model = model::Transformer::Load(model_dir, {at::kFloat, at::kCPU, false});
  if (!model.ok()) return model.status();
  auto tokenizer = tokenizer::Tokenizer::FromFile(model_dir + "/tokenizer.json");
  if (!tokenizer.ok()) return tokenizer.status();
  auto special = chat::SpecialTokenIds::Resolve(**tokenizer);
  if (!special.ok()) return special.status();
  auto datasets = tasks::LoadDatasets(config->tasks, 1);
  if (!datasets.ok()) return datasets.status();
  auto clients = rpc::StartSandboxClients(config->sandbox);
  if (!clients.ok()) return clients.status();
  auto pi = agent::BuiltinHarness("pi", 16384, 32);
  if (!pi.ok()) return pi.status();
  agent::HarnessSpec pi_start = *pi;
  pi_start.name = "pi-start";
  pi_start.command = "/opt/loom/harness/node_modules/.bin/pi --version";

  // One scaffold's episodes: wall time and the cell's figures.
  train::EvalInputs inputs{*config, **tokenizer, *datasets, *special};
  auto run = [&](train::AgentScaffold scaffold,
                 int inflight) -> absl::StatusOr<std::pair<double, train::AgentEvalCell>> {
    config->async.max_inflight = inflight;
    const auto start = std::chrono::steady_clock::now();
    auto cells = train::EvaluateAgentTasks(inputs, **model, {}, *clients->pool, {scaffold});
    if (!cells.ok()) return cells.status();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (cells->size() != 1) return absl::InternalError("one cell expected");
    return std::make_pair(wall, (*cells)[0]);
  };
  nlohmann::json result = {{"bench", "scaffold"},
                           {"loadavg_1m", load[0]},
                           {"episodes", flags.episodes},
                           {"sessions", flags.sessions},
                           {"tasks", flags.tasks}};
  double builtin_eps = 0, pi_eps = 0;
  for (const train::AgentScaffold& scaffold :
       {train::AgentScaffold{"builtin", std::nullopt}, train::AgentScaffold{"pi", *pi}}) {
    auto measured = run(scaffold, flags.sessions);
    if (!measured.ok()) return measured.status();
    const auto& [wall, cell] = *measured;
    const double eps = static_cast<double>(cell.episodes - cell.failures) / wall;
    (scaffold.name == "pi" ? pi_eps : builtin_eps) = eps;
    result["scaffolds"][scaffold.name] = {{"wall_s", wall},
                                          {"episodes_per_s", eps},
                                          {"failures", cell.failures},
                                          {"failures_by_cause", cell.failures_by_cause},
                                          {"mean_turns", cell.mean_turns},
                                          {"mean_tokens", cell.mean_tokens},
                                          {"pass_at_1", cell.pass_at_1}};
  }
  result["builtin_over_pi"] = pi_eps > 0 ? builtin_eps / pi_eps : 0.0;
  // A harness's start, one episode at a time: Pi's start and exit against
  // an empty command, both verified as an episode is.
  double start_s[2] = {0, 0};
  const train::AgentScaffold starts[2] = {{"pi-start", pi_start},
                                          {"empty", agent::CommandHarness("empty", "true")}};
  for (int i = 0; i < 2; ++i) {
    auto measured = run(starts[i], 1);
    if (!measured.ok()) return measured.status();
    start_s[i] = measured->first / flags.episodes;
  }
  result["startup"] = {{"pi_episode_s", start_s[0]},
                       {"empty_episode_s", start_s[1]},
                       {"pi_start_s", start_s[0] - start_s[1]}};
  return result;
}

void SetupBenchScaffold(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto flags = std::make_shared<ScaffoldBenchFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "scaffold", "Agent episodes/s under the built-in loop vs Pi, and a harness's start-up cost");
  cmd->add_option("--tasks", flags->tasks, "agent_jsonl task file (its first --episodes tasks)")
      ->capture_default_str();
  cmd->add_option("--episodes", flags->episodes, "Episodes per scaffold")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--sessions", flags->sessions, "Episodes at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--harness-dir", flags->harness_dir, "npm packages with Pi (scripts/setup.sh)")
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads, "Intra-op threads (default: LibTorch's)");
  cmd->callback([flags, &context] {
    context.exit_code =
        RunJsonBench("scaffold", flags->threads, [&] { return RunScaffoldBench(*flags); });
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench_scaffold", SetupBenchScaffold);

}  // namespace loom::cli
