#include "loom/train/evaluator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "loom/algo/length_reward.h"
#include "loom/rollout/engine.h"
#include "loom/train/agent_evaluator.h"
#include "train/encoding.h"

namespace loom::train {
namespace {

// One request of the evaluation: a held-out problem at one effort.
struct EvalPrompt {
  const tasks::Problem* problem;
  size_t cell;           // into EvalResult::cells
  size_t problem_index;  // within the cell, for pass@K
  std::vector<int64_t> tokens;
  uint64_t key = 0;  // EvalPromptKey: its samples' ids (and seeds)
};

// Held-out problems a dataset may have: EvalPromptKey's problem field.
constexpr size_t kMaxEvalProblems = size_t{1} << 24;

// The held-out prompts of every dataset × effort of `options`, and a cell each.
absl::StatusOr<std::vector<EvalPrompt>> EncodeEvalPrompts(const EvalInputs& inputs,
                                                          const EvalOptions& options,
                                                          std::vector<EvalCell>& cells,
                                                          std::vector<EvalTally>& totals) {
  const std::vector<int> efforts = EvalEfforts(inputs.config, options);
  std::vector<EvalPrompt> prompts;
  for (size_t d = 0; d < inputs.datasets.size(); ++d) {
    if (!options.datasets.empty() && std::find(options.datasets.begin(), options.datasets.end(),
                                               static_cast<int>(d)) == options.datasets.end()) {
      continue;
    }
    // Held-out agent tasks need episodes, not one greedy answer; the
    // evaluator scores single-turn prompts only.
    if (inputs.config.tasks.datasets[d].environment == "sandbox") continue;
    const std::vector<tasks::Problem>& problems = inputs.datasets[d]->Eval();
    if (problems.size() >= kMaxEvalProblems) {
      return absl::InvalidArgumentError("dataset '" + inputs.config.tasks.datasets[d].name +
                                        "': " + std::to_string(problems.size()) +
                                        " held-out problems; an evaluation takes at most " +
                                        std::to_string(kMaxEvalProblems - 1));
    }
    for (int effort : efforts) {
      cells.push_back({inputs.config.tasks.datasets[d].name, effort});
      cells.back().problems = static_cast<int64_t>(problems.size());
      totals.emplace_back(cells.back().problems);
      for (size_t j = 0; j < problems.size(); ++j) {
        auto prompt = EncodeProblemPrompt(problems[j], inputs.config.effort.PromptEffort(effort),
                                          inputs.tokenizer);
        if (!prompt.ok()) return prompt.status();
        prompts.push_back(
            {&problems[j], cells.size() - 1, j, *std::move(prompt), EvalPromptKey(d, effort, j)});
      }
    }
  }
  return prompts;
}

// The run's engine options with a pool for these prompts (EvalPoolTokens).
absl::StatusOr<std::unique_ptr<rollout::RolloutEngine>> CreateEvalEngine(
    const config::RunConfig& config, const model::Transformer& model,
    const std::vector<EvalPrompt>& prompts) {
  int64_t longest = 0;
  for (const EvalPrompt& p : prompts) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.tokens.size()));
  }
  rollout::EngineOptions options =
      rollout::EngineOptionsFromConfig(config.rollout, static_cast<uint64_t>(config.run.seed));
  options.pool_tokens =
      EvalPoolTokens(options, static_cast<int64_t>(prompts.size()), longest,
                     config.rollout.max_new_tokens, model.config().max_position_embeddings);
  return rollout::RolloutEngine::Create(model, options);
}

// The summary fields of `result` from its cells at the highest effort.
void SummarizeTopEffort(EvalResult& result, const std::vector<EvalTally>& totals) {
  int top = 0;
  for (const EvalCell& cell : result.cells) top = std::max(top, cell.effort);
  double reward = 0, parsed = 0, response = 0, samples = 0;
  for (size_t c = 0; c < result.cells.size(); ++c) {
    const EvalCell& cell = result.cells[c];
    if (cell.effort != top) continue;
    result.accuracy[cell.dataset] = cell.pass_at_1;
    result.problems += cell.problems;
    result.skipped += totals[c].skipped;
    reward += totals[c].reward;
    parsed += totals[c].parsed;
    response += totals[c].response;
    samples += static_cast<double>(totals[c].samples);
  }
  samples = std::max(samples, 1.0);
  result.overall = reward / samples;
  result.parse_rate = parsed / samples;
  result.mean_length = response / samples;
}

// This rank's share of `prompts`: problems are dealt round-robin.
void KeepShard(std::vector<EvalPrompt>& prompts, const dist::Group& group) {
  const auto size = static_cast<size_t>(group.size()), rank = static_cast<size_t>(group.rank());
  prompts.erase(std::remove_if(prompts.begin(), prompts.end(),
                               [&](const EvalPrompt& p) { return p.problem_index % size != rank; }),
                prompts.end());
}

// Adds up every rank's tallies (each holds its share of the problems).
absl::Status SumTallies(std::vector<EvalTally>& totals, dist::Group& group) {
  std::vector<double> flat;
  for (const EvalTally& t : totals) {
    flat.insert(flat.end(), {t.reward, t.reasoning, t.response, t.parsed,
                             static_cast<double>(t.samples), static_cast<double>(t.skipped)});
    for (bool solved : t.solved) flat.push_back(solved ? 1.0 : 0.0);
    flat.insert(flat.end(), t.problem_reward.begin(), t.problem_reward.end());
  }
  auto summed = group.Sum(flat);
  if (!summed.ok()) return summed.status();
  auto next = summed->begin();
  for (EvalTally& t : totals) {
    t.reward = *next++;
    t.reasoning = *next++;
    t.response = *next++;
    t.parsed = *next++;
    t.samples = static_cast<int64_t>(*next++);
    t.skipped = static_cast<int64_t>(*next++);
    for (size_t j = 0; j < t.solved.size(); ++j) t.solved[j] = *next++ > 0;
    for (double& r : t.problem_reward) r = *next++;
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t EvalPromptKey(size_t dataset, int effort, size_t problem) {
  return (static_cast<uint64_t>(dataset) << 32) | (static_cast<uint64_t>(effort) << 24) |
         static_cast<uint64_t>(problem);
}

std::vector<int> EvalEfforts(const config::RunConfig& config, const EvalOptions& options) {
  std::vector<int> efforts = options.efforts.empty() ? config.effort.levels : options.efforts;
  std::sort(efforts.begin(), efforts.end());
  efforts.erase(std::unique(efforts.begin(), efforts.end()), efforts.end());
  return efforts;
}

void EvalTally::Add(size_t problem, const std::vector<int64_t>& completion,
                    const algo::Judgement& judgement, int64_t think_end_id) {
  reward += judgement.reward;
  parsed += judgement.parsed;
  response += static_cast<double>(completion.size());
  reasoning += static_cast<double>(algo::ReasoningLength(completion, think_end_id));
  ++samples;
  if (judgement.reward > 0.5) solved[problem] = true;
  problem_reward[problem] += judgement.reward;
}

void EvalTally::AddUnstarted(bool first_of_problem) {
  skipped += first_of_problem;
  ++samples;
}

void EvalTally::Fill(EvalCell& cell) const {
  const double n = static_cast<double>(std::max<int64_t>(1, samples));
  cell.pass_at_1 = reward / n;
  cell.pass_at_1_stderr = MeanAndStderr(ProblemPassAt1()).second;
  cell.mean_reasoning_tokens = reasoning / n;
  cell.mean_response_tokens = response / n;
  cell.parse_rate = parsed / n;
  cell.pass_at_k = static_cast<double>(std::count(solved.begin(), solved.end(), true)) /
                   static_cast<double>(std::max<int64_t>(1, cell.problems));
}

std::vector<double> EvalTally::ProblemPassAt1() const {
  const double k = problem_reward.empty()
                       ? 1.0
                       : std::max(1.0, static_cast<double>(samples) /
                                           static_cast<double>(problem_reward.size()));
  std::vector<double> means;
  for (double r : problem_reward) means.push_back(r / k);
  return means;
}

void FillChange(const EvalTally& lower, int lower_effort, const EvalTally& higher, EvalCell& cell) {
  const std::vector<double> from = lower.ProblemPassAt1(), to = higher.ProblemPassAt1();
  std::vector<double> differences;
  for (size_t j = 0; j < std::min(from.size(), to.size()); ++j)
    differences.push_back(to[j] - from[j]);
  const auto [change, error] = MeanAndStderr(differences);
  cell.change_from = lower_effort;
  cell.pass_at_1_change = change;
  cell.pass_at_1_change_stderr = error;
}

int64_t EvalPoolTokens(const rollout::EngineOptions& run_engine, int64_t prompts,
                       int64_t longest_prompt, int64_t max_new_tokens, int64_t context_limit) {
  const int64_t block = run_engine.block_size;
  const int64_t sequence = std::min(longest_prompt + max_new_tokens, context_limit);
  const int64_t per_sample = std::max<int64_t>(1, (sequence + block - 1) / block) * block;
  const int64_t running = std::clamp<int64_t>(prompts, 1, run_engine.max_batch);
  return std::min(run_engine.pool_tokens, running * per_sample);
}

tasks::LedgerAttempt EvalAttempt(const tasks::Problem& problem, const std::string& dataset,
                                 int effort, const algo::Judgement& judgement, int64_t length,
                                 bool limit) {
  tasks::LedgerAttempt a;
  a.task_key = tasks::TaskKey(problem);
  a.task_id = problem.TaskId();
  a.dataset = dataset;
  a.split = "eval";
  a.effort = effort;
  a.reward = judgement.reward;
  a.passed = judgement.reward > 0.5;
  a.failure = judgement.parse_error;
  a.failure_kind = tasks::FailureKind(a.passed, false, limit, judgement.parsed);
  a.length = length;
  a.response = judgement.content;
  return a;
}

absl::StatusOr<EvalResult> Evaluate(const EvalInputs& inputs, const model::Transformer& model,
                                    const EvalOptions& options) {
  const config::RunConfig& config = inputs.config;
  EvalResult result;
  std::vector<EvalTally> totals;
  auto prompts = EncodeEvalPrompts(inputs, options, result.cells, totals);
  if (!prompts.ok()) return prompts.status();
  if (options.group != nullptr) KeepShard(*prompts, *options.group);
  auto engine = CreateEvalEngine(config, model, *prompts);
  if (!engine.ok()) return engine.status();
  result.pool_tokens = (*engine)->pool().num_blocks() * (*engine)->pool().block_size();

  const int samples = std::max(1, options.samples);
  std::unordered_map<uint64_t, const EvalPrompt*> by_id;  // sample id -> its prompt
  for (const EvalPrompt& prompt : *prompts) {
    for (int k = 0; k < samples; ++k) {
      rollout::SampleRequest request;
      request.id = prompt.key * static_cast<uint64_t>(samples) + static_cast<uint64_t>(k);
      request.prompt = prompt.tokens;
      request.sampling.temperature = samples == 1 ? 0 : options.temperature;
      request.stop.max_new_tokens = config.rollout.max_new_tokens;
      request.stop.eos_token_ids = {inputs.special_tokens.eos};
      if (absl::Status s = (*engine)->Add(request); !s.ok()) {
        // A prompt too long for the context or the pool: wrong, not fatal.
        if (k == 0) {
          spdlog::warn("dataset '{}': held-out problem {} could not start, counted as wrong: {}",
                       prompt.problem->dataset, prompt.problem->Describe(),
                       std::string(s.message()));
        }
        totals[prompt.cell].AddUnstarted(k == 0);
        if (options.attempts != nullptr) {
          const EvalCell& cell = result.cells[prompt.cell];
          algo::Judgement unstarted;
          unstarted.parse_error = "could not start: " + std::string(s.message());
          options.attempts->push_back(
              EvalAttempt(*prompt.problem, cell.dataset, cell.effort, unstarted, 0, true));
        }
        continue;
      }
      by_id[request.id] = &prompt;
    }
  }

  while ((*engine)->num_samples() > 0) {
    auto step = (*engine)->Step();
    if (!step.ok()) return step.status();
    for (const rollout::SampleState& sample : (*engine)->TakeFinished()) {
      const EvalPrompt& prompt = *by_id.at(sample.id);
      std::vector<int64_t> completion(sample.tokens.begin() + sample.prompt_length,
                                      sample.tokens.end());
      const algo::Judgement judgement =
          algo::JudgeCompletion(*prompt.problem, completion, inputs.tokenizer);
      totals[prompt.cell].Add(prompt.problem_index, completion, judgement,
                              inputs.special_tokens.think_end);
      if (options.attempts != nullptr) {
        const EvalCell& cell = result.cells[prompt.cell];
        options.attempts->push_back(
            EvalAttempt(*prompt.problem, cell.dataset, cell.effort, judgement,
                        static_cast<int64_t>(completion.size()),
                        sample.finish == rollout::FinishReason::kMaxNewTokens ||
                            sample.finish == rollout::FinishReason::kContextLimit));
      }
    }
  }
  if (options.group != nullptr) {
    if (absl::Status s = SumTallies(totals, *options.group); !s.ok()) return s;
  }
  for (size_t c = 0; c < result.cells.size(); ++c) {
    totals[c].Fill(result.cells[c]);
    // Cells run efforts ascending within a dataset.
    if (c > 0 && result.cells[c - 1].dataset == result.cells[c].dataset)
      FillChange(totals[c - 1], result.cells[c - 1].effort, totals[c], result.cells[c]);
  }
  SummarizeTopEffort(result, totals);
  return result;
}

absl::Status LogEvaluation(const EvalInputs& inputs, const model::Transformer& model,
                           dist::Group* group, const EvalPoint& point,
                           metrics::MetricsWriter& metrics, HeldOutAgentTasks* agents,
                           std::vector<tasks::LedgerAttempt>* attempts) {
  EvalOptions options;
  options.group = group;
  options.attempts = attempts;
  auto eval = Evaluate(inputs, model, options);
  if (!eval.ok()) return eval.status();
  nlohmann::json record = {{"stage", point.stage},
                           {"step", point.step},
                           {"version", point.version},
                           {"eval_accuracy", eval->overall},
                           {"eval_parse_rate", eval->parse_rate},
                           {"eval_mean_length", eval->mean_length},
                           {"eval_skipped", eval->skipped}};
  for (const auto& [name, accuracy] : eval->accuracy) {
    record["eval_accuracy_by_dataset"][name] = accuracy;
  }
  // Per effort, over every dataset (weighted by problems).
  std::map<int, std::array<double, 3>> by_effort;  // accuracy, reasoning, problems
  for (const EvalCell& cell : eval->cells) {
    const double n = static_cast<double>(cell.problems);
    by_effort[cell.effort][0] += cell.pass_at_1 * n;
    by_effort[cell.effort][1] += cell.mean_reasoning_tokens * n;
    by_effort[cell.effort][2] += n;
  }
  for (const auto& [effort, sums] : by_effort) {
    const std::string b = std::to_string(effort);
    record["eval_accuracy_by_effort"][b] = sums[0] / std::max(sums[2], 1.0);
    record["eval_reasoning_length_by_effort"][b] = sums[1] / std::max(sums[2], 1.0);
  }
  if (eval->problems > 0) {  // none when every dataset is an agent one
    spdlog::info("{} step {}: held-out accuracy {:.3f} over {} problems (well-formed {:.2f})",
                 point.stage, point.step, eval->overall, eval->problems, eval->parse_rate);
  }
  if (agents != nullptr && (group == nullptr || group->rank() == 0)) {
    auto cells = agents->Evaluate(inputs, model, attempts);
    if (!cells.ok()) return cells.status();
    // Cells run efforts ascending within a dataset: the last one is the top.
    for (const AgentEvalCell& cell : *cells) {
      record["eval_agent_pass@1_by_dataset"][cell.dataset] = cell.pass_at_1;
    }
    for (const auto& [dataset, pass] : record["eval_agent_pass@1_by_dataset"].items()) {
      spdlog::info("{} step {}: held-out agent tasks of '{}': pass@1 {:.3f}", point.stage,
                   point.step, dataset, pass.get<double>());
    }
    record["eval_agent_results"] = AgentCellsJson(*cells);
  }
  return metrics.Write(record);
}

}  // namespace loom::train
