#include "loom/train/evaluator.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "loom/rollout/engine.h"
#include "loom/train/encoding.h"

namespace loom::train {
namespace {

// A held-out problem and its encoded prompt.
struct EvalPrompt {
  const tasks::Problem* problem;
  std::vector<int64_t> tokens;
};

// The held-out prompts of `datasets` (empty: all) at the highest training effort level.
absl::StatusOr<std::vector<EvalPrompt>> EncodeEvalPrompts(const TrainContext& context,
                                                          const std::vector<int>& datasets) {
  const config::RunConfig& config = context.config;
  const int effort = *std::max_element(config.effort.levels.begin(), config.effort.levels.end());
  std::vector<EvalPrompt> prompts;
  for (size_t d = 0; d < context.datasets.size(); ++d) {
    if (!datasets.empty() &&
        std::find(datasets.begin(), datasets.end(), static_cast<int>(d)) == datasets.end()) {
      continue;
    }
    for (const tasks::Problem& problem : context.datasets[d]->Eval()) {
      auto prompt =
          EncodeProblemPrompt(problem, config.effort.PromptEffort(effort), context.tokenizer);
      if (!prompt.ok()) return prompt.status();
      prompts.push_back({&problem, *std::move(prompt)});
    }
  }
  return prompts;
}

// The run's engine options with a pool for these prompts (EvalPoolTokens).
absl::StatusOr<std::unique_ptr<rollout::RolloutEngine>> CreateEvalEngine(
    const TrainContext& context, const model::Transformer& model,
    const std::vector<EvalPrompt>& prompts) {
  const config::RunConfig& config = context.config;
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

}  // namespace

int64_t EvalPoolTokens(const rollout::EngineOptions& run_engine, int64_t prompts,
                       int64_t longest_prompt, int64_t max_new_tokens, int64_t context_limit) {
  const int64_t block = run_engine.block_size;
  const int64_t sequence = std::min(longest_prompt + max_new_tokens, context_limit);
  const int64_t per_sample = std::max<int64_t>(1, (sequence + block - 1) / block) * block;
  const int64_t running = std::clamp<int64_t>(prompts, 1, run_engine.max_batch);
  return std::min(run_engine.pool_tokens, running * per_sample);
}

absl::StatusOr<EvalResult> Evaluate(const TrainContext& context) {
  return Evaluate(context, context.model, {});
}

absl::StatusOr<EvalResult> Evaluate(const TrainContext& context, const model::Transformer& model,
                                    const std::vector<int>& datasets) {
  const config::RunConfig& config = context.config;
  auto prompts = EncodeEvalPrompts(context, datasets);
  if (!prompts.ok()) return prompts.status();
  auto engine = CreateEvalEngine(context, model, *prompts);
  if (!engine.ok()) return engine.status();

  EvalResult result;
  result.pool_tokens = (*engine)->pool().num_blocks() * (*engine)->pool().block_size();
  std::map<std::string, std::pair<double, int64_t>> per_dataset;  // reward sum, count
  // Sample ids index into `problems`.
  std::vector<const tasks::Problem*> problems;
  for (EvalPrompt& prompt : *prompts) {
    const tasks::Problem& problem = *prompt.problem;
    rollout::SampleRequest request;
    request.id = problems.size();
    request.prompt = std::move(prompt.tokens);
    request.sampling.temperature = 0;  // greedy
    request.stop.max_new_tokens = config.rollout.max_new_tokens;
    request.stop.eos_token_ids = {context.special_tokens.eos};
    if (absl::Status s = (*engine)->Add(request); !s.ok()) {
      // A prompt too long for the context or the pool: wrong, not fatal.
      spdlog::warn("dataset '{}': held-out problem {} could not start, counted as wrong: {}",
                   problem.dataset, problem.Describe(), std::string(s.message()));
      ++per_dataset[problem.dataset].second;
      ++result.skipped;
      continue;
    }
    problems.push_back(&problem);
  }

  int64_t parsed = 0, generated = 0;
  while ((*engine)->num_samples() > 0) {
    auto step = (*engine)->Step();
    if (!step.ok()) return step.status();
    for (const rollout::SampleState& sample : (*engine)->TakeFinished()) {
      const tasks::Problem& problem = *problems[sample.id];
      std::vector<int64_t> completion(sample.tokens.begin() + sample.prompt_length,
                                      sample.tokens.end());
      Judgement judgement = JudgeCompletion(problem, completion, context.tokenizer);
      auto& [sum, count] = per_dataset[problem.dataset];
      sum += judgement.reward;
      ++count;
      parsed += judgement.parsed;
      generated += static_cast<int64_t>(completion.size());
    }
  }
  double total = 0;
  for (const auto& [name, sum_count] : per_dataset) {
    result.accuracy[name] = sum_count.first / std::max<int64_t>(1, sum_count.second);
    total += sum_count.first;
  }
  result.problems = static_cast<int64_t>(problems.size()) + result.skipped;
  const double n = static_cast<double>(std::max<int64_t>(1, result.problems));
  result.overall = total / n;
  result.parse_rate = static_cast<double>(parsed) / n;
  result.mean_length = static_cast<double>(generated) / n;
  return result;
}

absl::Status LogEvaluation(TrainContext& context, const char* stage, int64_t step) {
  auto eval = Evaluate(context);
  if (!eval.ok()) return eval.status();
  nlohmann::json record = {{"stage", stage},
                           {"step", step},
                           {"version", context.policy_version},
                           {"eval_accuracy", eval->overall},
                           {"eval_parse_rate", eval->parse_rate},
                           {"eval_mean_length", eval->mean_length},
                           {"eval_skipped", eval->skipped}};
  for (const auto& [name, accuracy] : eval->accuracy) {
    record["eval_accuracy_by_dataset"][name] = accuracy;
  }
  spdlog::info("{} step {}: held-out accuracy {:.3f} over {} problems (well-formed {:.2f})", stage,
               step, eval->overall, eval->problems, eval->parse_rate);
  return context.metrics.Write(record);
}

}  // namespace loom::train
