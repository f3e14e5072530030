#include "loom/train/agent_evaluator.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <mutex>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "loom/agent/rollout.h"
#include "loom/base/parallel.h"
#include "loom/chat/special_tokens.h"
#include "loom/config/check.h"
#include "loom/rpc/sandbox_clients.h"
#include "loom/serve/turn_runner.h"
#include "loom/tasks/agent_jsonl.h"

namespace loom::train {
namespace {

// One episode to run: a held-out task of a cell, its k-th sample.
struct AgentEvalSample {
  rollout::SampleRequest request;
  const tasks::AgentTask* task;
  int effort = 0;  // as the prompt shows it (0: none)
  size_t cell = 0;
  size_t task_index = 0;  // within the cell
};

// What an evaluation keeps of one episode, under any scaffold.
struct EpisodeFigures {
  double reward = 0;
  bool infrastructure = false;  // masked: counted apart, by cause
  std::string cause;
  double turns = 0, format_errors = 0, tokens = 0;
  double tool_calls = 0;  // the turns that called tools
};

EpisodeFigures FiguresOf(const agent::AgentResult& result) {
  EpisodeFigures f;
  f.reward = result.outcome.reward;
  f.infrastructure = result.outcome.infrastructure;
  f.cause = result.outcome.cause();
  f.turns = result.trajectory.value("steps", 0);
  f.tool_calls = result.outcome.steps;
  f.format_errors = result.outcome.format_errors;
  f.tokens = static_cast<double>(
      std::count(result.state.loss_mask.begin(), result.state.loss_mask.end(), 1));
  return f;
}

EpisodeFigures FiguresOf(const agent::HarnessEpisode& episode) {
  EpisodeFigures f;
  f.reward = episode.reward();
  f.infrastructure = episode.infrastructure;
  f.cause = episode.failure.substr(0, episode.failure.find(':'));
  f.turns = static_cast<double>(episode.record.calls.size());
  f.tool_calls = agent::OutcomeOf(episode).steps;
  for (const serve::CallRecord& call : episode.record.calls) {
    f.format_errors += call.format_error;
    f.tokens += static_cast<double>(call.completion_tokens);
  }
  return f;
}

// Where a finished episode goes: its cell's tally, and the attempts.
using RecordEpisode = std::function<void(const AgentEvalSample&, const EpisodeFigures&)>;

// What a cell's finished episodes add up to.
struct AgentTally {
  std::vector<double> reward;  // per task: the sum over its counted episodes
  std::vector<int> counted;    // per task: episodes that did not fail
  std::vector<bool> solved;    // per task: some episode with reward > 0.5
  double turns = 0, tokens = 0, format_errors = 0;
  int64_t episodes = 0, failures = 0;
  std::map<std::string, int64_t> causes;

  explicit AgentTally(size_t tasks) : reward(tasks, 0.0), counted(tasks, 0), solved(tasks, false) {}

  void Add(size_t task, const EpisodeFigures& f) {
    ++episodes;
    if (f.infrastructure) {
      ++failures;
      ++causes[f.cause];
      return;
    }
    reward[task] += f.reward;
    ++counted[task];
    if (f.reward > 0.5) solved[task] = true;
    turns += f.turns;
    format_errors += f.format_errors;
    tokens += f.tokens;
  }

  void Fill(AgentEvalCell& cell) const {
    std::vector<double> pass;  // per task with a counted episode
    int64_t solved_tasks = 0;
    for (size_t j = 0; j < reward.size(); ++j) {
      if (counted[j] == 0) continue;
      pass.push_back(reward[j] / counted[j]);
      solved_tasks += solved[j];
    }
    const double n = std::max(1.0, static_cast<double>(episodes - failures));
    double total = 0;
    for (double r : reward) total += r;
    cell.episodes = episodes;
    cell.pass_at_1 = total / n;
    cell.pass_at_1_stderr = MeanAndStderr(pass).second;
    cell.pass_at_k = pass.empty() ? 0.0 : static_cast<double>(solved_tasks) / pass.size();
    cell.mean_turns = turns / n;
    cell.mean_tokens = tokens / n;
    cell.format_error_rate = format_errors / std::max(1.0, turns);
    cell.failures = failures;
    cell.failures_by_cause = causes;
  }
};

// The cells and episodes of every selected sandbox dataset's held-out
// tasks under every scaffold; plans[s] holds scaffold s's episodes.
std::vector<std::vector<AgentEvalSample>> PlanEpisodes(const EvalInputs& inputs,
                                                       const EvalOptions& options,
                                                       const std::vector<AgentScaffold>& scaffolds,
                                                       std::vector<AgentEvalCell>& cells,
                                                       std::vector<AgentTally>& tallies) {
  const config::RunConfig& config = inputs.config;
  const int samples = std::max(1, options.samples);
  std::vector<std::vector<AgentEvalSample>> plans(scaffolds.size());
  for (size_t d = 0; d < inputs.datasets.size(); ++d) {
    const bool selected =
        options.datasets.empty() ||
        std::count(options.datasets.begin(), options.datasets.end(), static_cast<int>(d)) > 0;
    if (!selected || config.tasks.datasets[d].environment != "sandbox") continue;
    const std::vector<tasks::Problem>& held_out = inputs.datasets[d]->Eval();
    if (held_out.empty()) continue;
    for (size_t s = 0; s < scaffolds.size(); ++s) {
      for (int effort : EvalEfforts(config, options)) {
        AgentEvalCell& cell = cells.emplace_back();
        cell.dataset = config.tasks.datasets[d].name;
        cell.scaffold = scaffolds[s].name;
        cell.effort = effort;
        cell.tasks = static_cast<int64_t>(held_out.size());
        tallies.emplace_back(held_out.size());
        for (size_t j = 0; j < held_out.size(); ++j) {
          LOOM_CHECK(held_out[j].agent_task != nullptr, "held-out agent problem without its task");
          for (int k = 0; k < samples; ++k) {
            AgentEvalSample sample;
            sample.request.id = EvalPromptKey(d, effort, j) * static_cast<uint64_t>(samples) +
                                static_cast<uint64_t>(k);
            sample.request.sampling = {samples == 1 ? 0.0 : options.temperature,
                                       config.rollout.top_p, config.rollout.top_k};
            sample.request.stop.max_new_tokens = config.rollout.max_new_tokens;
            sample.request.stop.eos_token_ids = {inputs.special_tokens.eos};
            sample.task = held_out[j].agent_task.get();
            sample.effort = config.effort.PromptEffort(effort);
            sample.cell = cells.size() - 1;
            sample.task_index = j;
            plans[s].push_back(std::move(sample));
          }
        }
      }
    }
  }
  return plans;
}

// The evaluation engine's options: room for `inflight` episodes at the
// model's full context (an episode's sequence grows with every turn).
rollout::EngineOptions EpisodeEngineOptions(const config::RunConfig& config,
                                            const model::Transformer& model, size_t inflight) {
  rollout::EngineOptions options =
      rollout::EngineOptionsFromConfig(config.rollout, static_cast<uint64_t>(config.run.seed));
  const int64_t context = model.config().max_position_embeddings;
  options.pool_tokens =
      EvalPoolTokens(options, static_cast<int64_t>(inflight), 0, context, context);
  return options;
}

// The built-in loop: `plan`'s episodes, at most `inflight` at once.
absl::Status RunBuiltin(const EvalInputs& inputs, const model::Transformer& model,
                        rpc::WorkerPool& pool, const std::vector<AgentEvalSample>& plan,
                        size_t inflight, const RecordEpisode& record) {
  const config::RunConfig& config = inputs.config;
  auto engine = rollout::RolloutEngine::Create(
      model, EpisodeEngineOptions(config, model, std::min(inflight, plan.size())));
  if (!engine.ok()) return engine.status();
  auto turn_end = chat::ToolCallsEndIds(inputs.tokenizer);
  if (!turn_end.ok()) return turn_end.status();
  agent::AgentOptions agent_options;
  agent_options.scaffold = rpc::ScaffoldOptionsFrom(config.sandbox);
  agent_options.turn_timeout_s = config.sandbox.episode_timeout_s;
  agent_options.eos_id = inputs.special_tokens.eos;
  agent::AgentEpisodes episodes(pool, inputs.tokenizer, agent_options);
  agent::AgentRollout rollout(episodes, **engine, inputs.tokenizer, inputs.special_tokens.eos,
                              *std::move(turn_end), config.sandbox.max_turn_tokens,
                              /*lockstep=*/config.run.deterministic);

  std::unordered_map<uint64_t, const AgentEvalSample*> by_id;
  std::deque<const AgentEvalSample*> waiting;
  for (const AgentEvalSample& sample : plan) waiting.push_back(&sample);
  size_t running = 0, done = 0;
  while (done < plan.size()) {
    while (running < inflight && !waiting.empty()) {
      const AgentEvalSample& sample = *waiting.front();
      waiting.pop_front();
      by_id[sample.request.id] = &sample;
      rollout.Start(sample.request, sample.task->task, sample.effort);
      ++running;
    }
    const bool idle = (*engine)->num_running() + (*engine)->num_waiting() == 0;
    for (const agent::AgentResult& result : rollout.Pump(idle ? 0.05 : 0)) {
      record(*by_id.at(result.state.id), FiguresOf(result));
      --running;
      ++done;
    }
    if ((*engine)->num_samples() > 0) {
      auto stats = (*engine)->Step();
      if (!stats.ok()) return stats.status();
      rollout.OnStopped(stats->tool_wait);
    }
    for (rollout::SampleState& state : (*engine)->TakeFinished()) {
      LOOM_CHECK(rollout.Hold(state), "evaluation sample " << state.id << " is not an episode's");
    }
  }
  return absl::OkStatus();
}

// An external harness: `plan`'s episodes on `inflight` threads, each
// blocking on its harness, their model calls batched by one TurnRunner.
absl::Status RunHarness(const EvalInputs& inputs, const model::Transformer& model,
                        rpc::WorkerPool& pool, const agent::HarnessSpec& harness,
                        const std::vector<AgentEvalSample>& plan, size_t inflight,
                        const EvalOptions& options, const RecordEpisode& record) {
  const config::RunConfig& config = inputs.config;
  inflight = std::min(inflight, plan.size());
  auto runner = serve::TurnRunner::Start(model, EpisodeEngineOptions(config, model, inflight));
  if (!runner.ok()) return runner.status();
  serve::EndpointOptions endpoint_options;
  endpoint_options.context_window = model.config().max_position_embeddings;
  auto endpoint = serve::Endpoint::Create(inputs.tokenizer, **runner, endpoint_options);
  if (!endpoint.ok()) return endpoint.status();

  std::mutex mu;
  ParallelFor(plan.size(), inflight, [&](size_t i) {
    const AgentEvalSample& sample = plan[i];
    agent::HarnessEpisodeOptions episode_options;
    if (sample.effort > 0) episode_options.effort = std::to_string(sample.effort);
    episode_options.temperature = options.samples > 1 ? options.temperature : 0.0;
    episode_options.timeout_s = config.sandbox.max_time_s;
    episode_options.max_turn_tokens = config.sandbox.max_turn_tokens;
    const agent::HarnessEpisode episode =
        agent::RunHarnessEpisode(pool, **endpoint, harness, sample.task->task, episode_options);
    if (episode.infrastructure) {
      spdlog::warn("held-out task {} under {}: {}", sample.task->task.id(), harness.name,
                   episode.failure);
    } else {
      const std::string& err = episode.done.stderr();
      spdlog::info("held-out task {} under {}: exit {}, {} calls, reward {}{}; stderr: {}",
                   sample.task->task.id(), harness.name, episode.done.exit_code(),
                   episode.done.calls(), episode.reward(),
                   episode.failure.empty() ? "" : ", " + episode.failure,
                   err.substr(err.size() - std::min<size_t>(err.size(), 500)));
    }
    std::lock_guard<std::mutex> lock(mu);
    record(sample, FiguresOf(episode));
  });
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<AgentEvalCell>> EvaluateAgentTasks(
    const EvalInputs& inputs, const model::Transformer& model, const EvalOptions& options,
    rpc::WorkerPool& pool, const std::vector<AgentScaffold>& scaffolds) {
  std::vector<AgentEvalCell> cells;
  std::vector<AgentTally> tallies;
  const std::vector<std::vector<AgentEvalSample>> plans =
      PlanEpisodes(inputs, options, scaffolds, cells, tallies);
  // At most async.max_inflight episodes at once, as in training: the
  // workers' sandboxes are the limit, not the engine.
  const size_t inflight = static_cast<size_t>(std::max(1, inputs.config.async.max_inflight));
  auto record = [&](const AgentEvalSample& sample, const EpisodeFigures& f) {
    tallies[sample.cell].Add(sample.task_index, f);
    if (options.attempts == nullptr) return;
    const AgentEvalCell& cell = cells[sample.cell];
    tasks::LedgerAttempt& a = options.attempts->emplace_back();
    a.task_key = tasks::TaskKey(*sample.task);
    a.task_id = sample.task->task.id();
    a.dataset = cell.dataset;
    a.split = "eval";
    a.effort = cell.effort;
    a.harness = cell.scaffold;
    a.reward = f.reward;
    a.passed = f.reward > 0.5;
    a.failure = f.cause;
    a.failure_kind = tasks::FailureKind(a.passed, f.infrastructure, tasks::IsLimitCause(f.cause),
                                        f.format_errors == 0);
    a.length = static_cast<int64_t>(f.tokens);
    a.steps = static_cast<int>(f.tool_calls);
  };
  for (size_t s = 0; s < scaffolds.size(); ++s) {
    if (plans[s].empty()) continue;
    // A pool of its own: the built-in loop's episodes cancel theirs as they end.
    rpc::WorkerPool workers(pool.options());
    const absl::Status status =
        scaffolds[s].harness ? RunHarness(inputs, model, workers, *scaffolds[s].harness, plans[s],
                                          inflight, options, record)
                             : RunBuiltin(inputs, model, workers, plans[s], inflight, record);
    if (!status.ok()) return status;
  }
  for (size_t c = 0; c < cells.size(); ++c) tallies[c].Fill(cells[c]);
  return cells;
}

absl::StatusOr<AgentScaffold> DatasetScaffold(const config::DatasetSection& dataset,
                                              int64_t context_window, int64_t max_new_tokens) {
  AgentScaffold scaffold;
  scaffold.name = dataset.harness;
  if (dataset.harness == "builtin") return scaffold;
  if (!dataset.harness_command.empty()) {
    scaffold.harness = agent::CommandHarness(dataset.harness, dataset.harness_command);
  } else {
    auto builtin = agent::BuiltinHarness(dataset.harness, context_window, max_new_tokens);
    if (!builtin.ok()) return builtin.status();
    scaffold.harness = *std::move(builtin);
    agent::AddArguments(*scaffold.harness, dataset.harness_args);
  }
  for (const auto& [name, value] : dataset.harness_env) scaffold.harness->env[name] = value;
  return scaffold;
}

nlohmann::json AgentCellsJson(const std::vector<AgentEvalCell>& cells) {
  nlohmann::json rows = nlohmann::json::array();
  for (const AgentEvalCell& c : cells) {
    rows.push_back({{"dataset", c.dataset},
                    {"scaffold", c.scaffold},
                    {"effort", c.effort},
                    {"tasks", c.tasks},
                    {"episodes", c.episodes},
                    {"pass@1", c.pass_at_1},
                    {"pass@1_stderr", c.pass_at_1_stderr},
                    {"pass@K", c.pass_at_k},
                    {"mean_turns", c.mean_turns},
                    {"mean_tokens", c.mean_tokens},
                    {"format_error_rate", c.format_error_rate},
                    {"failures", c.failures},
                    {"failures_by_cause", c.failures_by_cause}});
  }
  return rows;
}

absl::StatusOr<std::unique_ptr<HeldOutAgentTasks>> HeldOutAgentTasks::Create(
    const EvalInputs& inputs, int64_t context_window) {
  std::vector<std::pair<int, AgentScaffold>> scaffolds;
  for (size_t d = 0; d < inputs.datasets.size(); ++d) {
    const config::DatasetSection& dataset = inputs.config.tasks.datasets[d];
    if (dataset.environment != "sandbox" || inputs.datasets[d]->Eval().empty()) continue;
    auto scaffold = DatasetScaffold(dataset, context_window, inputs.config.rollout.max_new_tokens);
    if (!scaffold.ok()) return scaffold.status();
    scaffolds.emplace_back(static_cast<int>(d), *std::move(scaffold));
  }
  if (scaffolds.empty()) return nullptr;
  auto clients = rpc::StartSandboxClients(inputs.config.sandbox);
  if (!clients.ok()) return clients.status();
  return std::unique_ptr<HeldOutAgentTasks>(
      new HeldOutAgentTasks(std::move(scaffolds), *std::move(clients)));
}

absl::StatusOr<std::vector<AgentEvalCell>> HeldOutAgentTasks::Evaluate(
    const EvalInputs& inputs, const model::Transformer& model,
    std::vector<tasks::LedgerAttempt>* attempts) {
  std::vector<AgentEvalCell> cells;
  for (const auto& [dataset, scaffold] : scaffolds_) {
    EvalOptions options;
    options.datasets = {dataset};
    options.attempts = attempts;
    auto evaluated = EvaluateAgentTasks(inputs, model, options, *clients_.pool, {scaffold});
    if (!evaluated.ok()) return evaluated.status();
    cells.insert(cells.end(), evaluated->begin(), evaluated->end());
  }
  return cells;
}

}  // namespace loom::train
