#include "loom/train/evaluator.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "loom/rollout/engine.h"
#include "loom/train/encoding.h"

namespace loom::train {

absl::StatusOr<EvalResult> Evaluate(const TrainContext& context) {
  const config::RunConfig& config = context.config;
  rollout::EngineOptions options =
      rollout::EngineOptionsFromConfig(config.rollout, static_cast<uint64_t>(config.run.seed));
  auto engine = rollout::RolloutEngine::Create(context.model, options);
  if (!engine.ok()) return engine.status();
  const int effort = *std::max_element(config.effort.levels.begin(), config.effort.levels.end());

  EvalResult result;
  std::map<std::string, std::pair<double, int64_t>> per_dataset;  // reward sum, count
  // Sample ids index into `problems`.
  std::vector<const tasks::Problem*> problems;
  for (const auto& dataset : context.datasets) {
    for (const tasks::Problem& problem : dataset->Eval()) {
      auto prompt =
          EncodeProblemPrompt(problem, config.effort.PromptEffort(effort), context.tokenizer);
      if (!prompt.ok()) return prompt.status();
      rollout::SampleRequest request;
      request.id = problems.size();
      request.prompt = *std::move(prompt);
      request.sampling.temperature = 0;  // greedy
      request.stop.max_new_tokens = config.rollout.max_new_tokens;
      request.stop.eos_token_ids = {context.special_tokens.eos};
      if (absl::Status s = (*engine)->Add(request); !s.ok()) {
        // A prompt too long for the context or the pool: wrong, not fatal.
        spdlog::warn("dataset '{}': held-out problem {}{} could not start, counted as wrong: {}",
                     problem.dataset, problem.id,
                     problem.source.empty() ? "" : " (" + problem.source + ")",
                     std::string(s.message()));
        ++per_dataset[problem.dataset].second;
        ++result.skipped;
        continue;
      }
      problems.push_back(&problem);
    }
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
