#include "loom/bench/dispatch_bench.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "loom/base/random.h"
#include "loom/config/check.h"
#include "loom/metrics/progress.h"
#include "loom/model/transformer.h"
#include "loom/rollout/engine.h"
#include "loom/train/async_loop.h"
#include "loom/train/batching.h"
#include "loom/train/stage_optimizer.h"

namespace loom::bench {
namespace {

using train::AsyncLoop;
using train::Batch;
using train::BatchTrainer;
using train::InflightObservations;
using train::LoopHooks;
using train::PromptSource;
using train::SampleEntry;
using train::ShiftedBatch;
using train::StageOptimizer;
using train::TeacherForcing;
using train::TrainedStep;
using train::TrainingSample;

// A deterministic draw per (seed, id, stream).
double Uniform(uint64_t seed, uint64_t id, uint64_t stream) {
  return UnitInterval(Mix64(Mix64(seed ^ stream) ^ id));
}

// Random prompts whose responses have heavy-tailed lengths.
class LongTailPrompts : public PromptSource {
 public:
  LongTailPrompts(const DispatchBenchOptions& options, int64_t vocab)
      : options_(options), vocab_(vocab) {}

  Prompt Open(const dispatch::PromptGroup& group, const dispatch::Subgroup& subgroup,
              const dispatch::SampleTicket& ticket) override {
    Prompt prompt;
    prompt.entry.effort = subgroup.effort;
    rollout::SampleRequest request;
    request.prompt.resize(16);
    for (size_t i = 0; i < request.prompt.size(); ++i) {
      request.prompt[i] =
          static_cast<int64_t>(Uniform(options_.seed, group.prompt_id, i + 100) * vocab_);
    }
    request.sampling.temperature = 1.0;
    request.stop.max_new_tokens = Length(ticket.sample_id);
    prompt.request = std::move(request);
    return prompt;
  }

  absl::StatusOr<rollout::SampleRequest> Reopen(SampleEntry&) override {
    return absl::UnimplementedError("the dispatch bench does not resume");
  }

 private:
  // Pareto(min_length, alpha), capped at max_length.
  int64_t Length(uint64_t sample_id) const {
    const double u = std::max(1e-12, 1.0 - Uniform(options_.seed, sample_id, 7));
    const double x =
        static_cast<double>(options_.min_length) * std::pow(u, -1.0 / options_.pareto_alpha);
    return std::min<int64_t>(options_.max_length, static_cast<int64_t>(x));
  }

  const DispatchBenchOptions& options_;
  int64_t vocab_;
};

// One real training step on the batch's sequences: maximise their
// log-likelihood (the work of a GRPO step without rewards), AdamW at a tiny
// constant learning rate, no clipping.
class LikelihoodTrainer : public BatchTrainer {
 public:
  LikelihoodTrainer(model::Transformer& model, const config::OptimizerFields& fields)
      : model_(model), optimizer_(model, fields) {}

  absl::StatusOr<TrainedStep> Train(const Batch& batch) override {
    const double start = metrics::ProgressLine::SteadySeconds();
    std::vector<const std::vector<int64_t>*> tokens;
    std::vector<const std::vector<uint8_t>*> masks;
    for (const TrainingSample& s : batch.samples) {
      tokens.push_back(&s.state.tokens);
      masks.push_back(&s.state.loss_mask);
    }
    ShiftedBatch shifted = TeacherForcing(tokens, masks);
    auto scored = model_.Score(shifted.batch);
    if (!scored.ok()) return scored.status();
    (-(scored->logprobs * shifted.target_weight).sum() / shifted.target_weight.sum().clamp_min(1))
        .backward();
    if (auto applied = optimizer_.Step(batch.step); !applied.ok()) return applied.status();
    return TrainedStep{{{"samples", batch.samples.size()},
                        {"train_seconds", metrics::ProgressLine::SteadySeconds() - start}},
                       batch.policy_version + 1};
  }

 private:
  model::Transformer& model_;
  StageOptimizer optimizer_;
};

absl::StatusOr<nlohmann::json> RunMode(const std::string& mode, const DispatchBenchOptions& options,
                                       model::Transformer& model) {
  AsyncLoop::Options loop_options;
  loop_options.engine.max_batch = options.max_inflight;
  loop_options.engine.pool_tokens =
      (options.max_length + 32) * (options.max_inflight + options.batch_samples) * 2;
  loop_options.engine.step_token_budget = 4096;
  loop_options.engine.seed = options.seed;
  dispatch::DispatchOptions& dispatch = loop_options.dispatch;
  dispatch.policy = mode;
  dispatch.max_inflight = options.max_inflight;
  dispatch.batch_samples = options.batch_samples;
  dispatch.max_staleness = options.max_staleness;
  dispatch.efforts = {{100, options.group_size}};
  dispatch.datasets = {{"longtail", 1.0, 0}};
  dispatch.seed = options.seed;
  auto loop = AsyncLoop::Create(model, loop_options);
  if (!loop.ok()) return loop.status();
  LongTailPrompts prompts(options, model.config().vocab_size);

  config::OptimizerFields fields;
  fields.steps = options.train_steps;
  fields.lr = 1e-6;
  fields.warmup_steps = 0;
  fields.min_lr_ratio = 1.0;
  fields.grad_clip = 0;
  fields.beta2 = 0.999;
  int64_t trained = 0, decode_tokens = 0;
  LikelihoodTrainer trainer(model, fields);
  double train_seconds = 0;
  LoopHooks hooks;
  hooks.after_step = [&](int64_t, const nlohmann::json& record) {
    trained += record["samples"].get<int64_t>();
    train_seconds += record["train_seconds"].get<double>();
    decode_tokens += record["decode_tokens"].get<int64_t>();
    return absl::OkStatus();
  };
  const double start = metrics::ProgressLine::SteadySeconds();
  if (absl::Status s = (*loop)->Run(prompts, trainer, options.train_steps, hooks); !s.ok()) {
    return s;
  }
  const double seconds = metrics::ProgressLine::SteadySeconds() - start;
  const InflightObservations& seen = (*loop)->inflight();
  const double n = static_cast<double>(std::max<int64_t>(1, seen.count));
  const double mean = seen.sum / n;
  const double variance = std::max(0.0, seen.sum_sq / n - mean * mean);
  return nlohmann::json{{"mode", mode},
                        {"train_steps", (*loop)->step()},
                        {"samples", trained},
                        {"seconds", seconds},
                        {"samples_per_s", static_cast<double>(trained) / seconds},
                        {"decode_tokens_per_s", static_cast<double>(decode_tokens) / seconds},
                        {"train_seconds", train_seconds},
                        {"inflight_mean", mean},
                        {"inflight_cv", mean > 0 ? std::sqrt(variance) / mean : 0.0}};
}

}  // namespace

absl::StatusOr<nlohmann::json> RunDispatchBench(const DispatchBenchOptions& options) {
  auto config = model::DefaultModelConfig("llama");
  if (!config.ok()) return config.status();
  config->vocab_size = 512;
  config->hidden_size = 128;
  config->intermediate_size = 384;
  config->num_hidden_layers = 2;
  config->num_attention_heads = 4;
  config->num_key_value_heads = 2;
  config->head_dim = 32;
  config->max_position_embeddings = static_cast<int64_t>(options.max_length) + 64;
  nlohmann::json result = {{"benchmark", "dispatch"},
                           {"quick", options.quick},
                           {"train_steps", options.train_steps},
                           {"batch_samples", options.batch_samples},
                           {"max_inflight", options.max_inflight},
                           {"group_size", options.group_size},
                           {"max_staleness", options.max_staleness},
                           {"length_pareto_alpha", options.pareto_alpha},
                           {"length_min", options.min_length},
                           {"length_max", options.max_length}};
  std::map<std::string, double> rate;
  for (const std::string& mode : options.modes) {
    // Every mode starts from the same weights.
    auto model =
        model::Transformer::RandomInit(*config, options.seed, {at::kFloat, at::kCPU, true});
    auto outcome = RunMode(mode, options, *model);
    if (!outcome.ok()) return outcome.status();
    rate[mode] = (*outcome)["samples_per_s"].get<double>();
    result["modes"][mode] = *outcome;
  }
  if (rate.count("sample") && rate.count("sync") && rate["sync"] > 0) {
    result["speedup_sample_vs_sync"] = rate["sample"] / rate["sync"];
  }
  return result;
}

}  // namespace loom::bench
