#include "loom/train/dispatch_bench.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "loom/config/check.h"
#include "loom/dispatch/dispatcher.h"
#include "loom/metrics/progress.h"
#include "loom/model/transformer.h"
#include "loom/rollout/engine.h"
#include "loom/train/adamw.h"
#include "loom/train/batching.h"

namespace loom::train {
namespace {

double Seconds() { return metrics::ProgressLine::SteadySeconds(); }

// splitmix64: a deterministic draw per (seed, id, stream).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double Uniform(uint64_t seed, uint64_t id, uint64_t stream) {
  return static_cast<double>(Mix(Mix(seed ^ stream) ^ id) >> 11) * 0x1.0p-53;
}

class LongTailPort : public dispatch::RolloutPort {
 public:
  LongTailPort(rollout::RolloutEngine& engine, const DispatchBenchOptions& options, int64_t vocab)
      : engine_(engine), options_(options), vocab_(vocab) {}

  int64_t PolicyVersion() const override { return engine_.policy_version(); }

  void Admit(const dispatch::PromptGroup& group) override {
    std::vector<int64_t> prompt(16);
    for (size_t i = 0; i < prompt.size(); ++i) {
      prompt[i] = static_cast<int64_t>(Uniform(options_.seed, group.prompt_id, i + 100) * vocab_);
    }
    for (const auto& subgroup : group.subgroups) {
      for (const auto& ticket : subgroup.samples) {
        rollout::SampleRequest request;
        request.id = ticket.sample_id;
        request.prompt = prompt;
        request.sampling.temperature = 1.0;
        request.stop.max_new_tokens = Length(ticket.sample_id);
        LOOM_CHECK(engine_.Add(request).ok(), "bench sample " << ticket.sample_id);
      }
    }
  }

  // Pareto(min_length, alpha), capped at max_length.
  int64_t Length(uint64_t sample_id) const {
    const double u = std::max(1e-12, 1.0 - Uniform(options_.seed, sample_id, 7));
    const double x = static_cast<double>(options_.min_length) * std::pow(u, -1.0 / options_.pareto_alpha);
    return std::min<int64_t>(options_.max_length, static_cast<int64_t>(x));
  }

 private:
  rollout::RolloutEngine& engine_;
  const DispatchBenchOptions& options_;
  int64_t vocab_;
};

// One real training step on the batch's sequences: maximise their log-likelihood
// (the work of a GRPO step without rewards), AdamW at a tiny learning rate.
void TrainOn(model::Transformer& model, AdamW& optimizer,
             const std::vector<rollout::SampleState>& batch) {
  std::vector<const std::vector<int64_t>*> tokens;
  std::vector<const std::vector<uint8_t>*> masks;
  for (const auto& s : batch) {
    tokens.push_back(&s.tokens);
    masks.push_back(&s.loss_mask);
  }
  ShiftedBatch shifted = TeacherForcing(tokens, masks);
  auto scored = model.Score(shifted.batch);
  LOOM_CHECK(scored.ok(), "" << scored.status().ToString());
  (-(scored->logprobs * shifted.target_weight).sum() / shifted.target_weight.sum().clamp_min(1))
      .backward();
  optimizer.Step(1e-6);
  optimizer.ZeroGrad();
}

absl::StatusOr<nlohmann::json> RunMode(const std::string& mode, const DispatchBenchOptions& options,
                                       model::Transformer& model) {
  AdamW optimizer(model.NamedParameters(), {});
  rollout::EngineOptions engine_options;
  engine_options.max_batch = options.max_inflight;
  engine_options.pool_tokens = (options.max_length + 32) * (options.max_inflight + options.batch_samples) * 2;
  engine_options.step_token_budget = 4096;
  engine_options.seed = options.seed;
  auto engine = rollout::RolloutEngine::Create(model, engine_options);
  if (!engine.ok()) return engine.status();
  dispatch::DispatchOptions dispatch_options;
  dispatch_options.policy = mode;
  dispatch_options.max_inflight = options.max_inflight;
  dispatch_options.batch_samples = options.batch_samples;
  dispatch_options.max_staleness = options.max_staleness;
  dispatch_options.efforts = {{100, options.group_size}};
  dispatch_options.datasets = {{"longtail", 1.0, 0}};
  dispatch_options.seed = options.seed;
  auto dispatcher = dispatch::Dispatcher::Create(dispatch_options);
  if (!dispatcher.ok()) return dispatcher.status();
  LongTailPort port(**engine, options, model.config().vocab_size);

  std::map<uint64_t, rollout::SampleState> finished;
  double inflight_sum = 0, inflight_sq = 0;
  int64_t observations = 0, trained = 0, steps = 0, decode_tokens = 0;
  double train_seconds = 0;
  const double start = Seconds();
  while (steps < options.train_steps) {
    (*dispatcher)->Refill(port);
    const double inflight = static_cast<double>((*engine)->num_samples());
    inflight_sum += inflight;
    inflight_sq += inflight * inflight;
    ++observations;
    auto stats = (*engine)->Step();
    if (!stats.ok()) return stats.status();
    decode_tokens += stats->decode_tokens;
    for (auto& sample : (*engine)->TakeFinished()) {
      const uint64_t id = sample.id;
      if ((*dispatcher)->OnSampleFinished(id) == dispatch::Disposition::kKeep) {
        finished.emplace(id, std::move(sample));
      }
    }
    auto batch = (*dispatcher)->TakeBatch((*engine)->policy_version());
    if (!batch) continue;
    (*engine)->ParkAll();
    const double train_start = Seconds();
    std::vector<rollout::SampleState> samples;
    for (const auto& subgroup : *batch) {
      for (uint64_t id : subgroup.sample_ids) {
        samples.push_back(std::move(finished.at(id)));
        finished.erase(id);
      }
    }
    TrainOn(model, optimizer, samples);
    train_seconds += Seconds() - train_start;
    trained += static_cast<int64_t>(samples.size());
    ++steps;
    if (absl::Status s = (*engine)->Resume((*engine)->policy_version() + 1); !s.ok()) return s;
  }
  const double seconds = Seconds() - start;
  const double mean = inflight_sum / static_cast<double>(observations);
  const double variance = std::max(0.0, inflight_sq / static_cast<double>(observations) - mean * mean);
  return nlohmann::json{{"mode", mode},
                        {"train_steps", steps},
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
    auto model = model::Transformer::RandomInit(*config, options.seed, {at::kFloat, at::kCPU, true});
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

}  // namespace loom::train
