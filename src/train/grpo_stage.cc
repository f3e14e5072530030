#include "loom/train/grpo_stage.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "loom/algo/advantages.h"
#include "loom/algo/length_reward.h"
#include "loom/algo/policy_loss.h"
#include "loom/config/check.h"
#include "loom/dispatch/dispatcher.h"
#include "loom/metrics/progress.h"
#include "loom/rollout/engine.h"
#include "loom/rpc/sandbox_clients.h"
#include "loom/sandbox/builtin_tasks.h"
#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/train/adamw.h"
#include "loom/train/batching.h"
#include "loom/train/encoding.h"
#include "loom/train/evaluator.h"
#include "loom/train/grpo_step.h"
#include "loom/train/stage_checkpoint.h"
#include "train/agent_rollout.h"
#include "train/agent_stage.h"

namespace loom::train {
namespace {

double Seconds() { return metrics::ProgressLine::SteadySeconds(); }

// The real engine as the dispatcher sees it: admitting a prompt group encodes
// its problem once per effort and adds every sample; a sandbox dataset's
// samples start their episodes instead (their prompts come from the worker).
class EnginePort : public dispatch::RolloutPort {
 public:
  EnginePort(const TrainContext& context, rollout::RolloutEngine& engine,
             std::map<uint64_t, SampleInfo>& samples, AgentRollout* agents)
      : context_(context), engine_(engine), samples_(samples), agents_(agents) {}

  int64_t PolicyVersion() const override { return engine_.policy_version(); }

  void Admit(const dispatch::PromptGroup& group) override {
    const auto& dataset = *context_.datasets[group.dataset];
    auto problem = std::make_shared<tasks::Problem>(dataset.Train(group.problem_index));
    const config::DatasetSection& spec = context_.config.tasks.datasets[group.dataset];
    const bool agent = spec.environment == "sandbox";
    for (const dispatch::Subgroup& subgroup : group.subgroups) {
      absl::StatusOr<std::vector<int64_t>> prompt = std::vector<int64_t>();
      if (!agent) {
        prompt = EncodeProblemPrompt(*problem, context_.config.effort.PromptEffort(subgroup.effort),
                                     context_.tokenizer);
      }
      for (const dispatch::SampleTicket& ticket : subgroup.samples) {
        samples_[ticket.sample_id] = SampleInfo{
            problem, subgroup.id, subgroup.effort, group.dataset, group.problem_index, agent,
            nullptr};
        if (!prompt.ok()) {
          failures_.push_back({ticket.sample_id, prompt.status()});
          continue;
        }
        rollout::SampleRequest request = Request(ticket.sample_id, *prompt);
        if (agent) {
          LOOM_CHECK(agents_ != nullptr, "sandbox dataset without sandbox clients");
          agents_->Start(std::move(request), sandbox::BuiltinTask(spec.kind, problem->task_seed),
                         context_.config.effort.PromptEffort(subgroup.effort));
        } else if (absl::Status s = engine_.Add(request); !s.ok()) {
          failures_.push_back({ticket.sample_id, s});
        }
      }
    }
  }

  // Samples that could not start (reported to the dispatcher as finished).
  std::vector<std::pair<uint64_t, absl::Status>> TakeFailures() { return std::move(failures_); }

 private:
  rollout::SampleRequest Request(uint64_t id, const std::vector<int64_t>& prompt) const {
    const config::RolloutSection& rollout = context_.config.rollout;
    rollout::SampleRequest request;
    request.id = id;
    request.prompt = prompt;
    request.sampling = {rollout.temperature, rollout.top_p, rollout.top_k};
    request.stop.max_new_tokens = rollout.max_new_tokens;
    request.stop.eos_token_ids = {context_.eos_id};
    return request;
  }

  const TrainContext& context_;
  rollout::RolloutEngine& engine_;
  std::map<uint64_t, SampleInfo>& samples_;
  AgentRollout* agents_;  // null without sandbox datasets
  std::vector<std::pair<uint64_t, absl::Status>> failures_;
};

// Samples that could not start (a prompt too long for the context or the KV
// pool): their prompt groups are dropped with one warning per problem naming
// where it came from, and counted (metric samples_failed); the run goes on.
void ReportFailures(const std::vector<std::pair<uint64_t, absl::Status>>& failures,
                    dispatch::Dispatcher& dispatcher, std::map<uint64_t, SampleInfo>& samples) {
  std::set<const tasks::Problem*> warned;
  for (const auto& [id, status] : failures) {
    auto info = samples.find(id);
    LOOM_CHECK(info != samples.end(), "failed sample " << id);
    const tasks::Problem& problem = *info->second.problem;
    if (warned.insert(&problem).second) {
      spdlog::warn("dataset '{}': problem {}{} could not start, its prompt group is dropped: {}",
                   problem.dataset, problem.id,
                   problem.source.empty() ? "" : " (" + problem.source + ")",
                   std::string(status.message()));
    }
    dispatcher.OnSampleFailed(id);
    samples.erase(info);
  }
}

// The frozen model of the KL penalty: the weights this stage started from, as
// saved on disk (the previous stage's output, or model.path when GRPO comes
// first), so a resumed run anchors to the same weights. Null when
// grpo.kl_coef is 0.
absl::StatusOr<std::unique_ptr<model::Transformer>> LoadReference(const TrainContext& context) {
  const config::RunConfig& config = context.config;
  if (config.grpo.kl_coef <= 0) return nullptr;
  const auto& stages = config.train.stages;
  const auto grpo = std::find(stages.begin(), stages.end(), "grpo");
  const std::string dir = grpo == stages.begin() ? config.model.path
                                                 : context.run_dir.stage_path(*std::prev(grpo));
  spdlog::info("grpo.kl_coef {}: KL reference from {}", config.grpo.kl_coef, dir);
  return model::Transformer::Load(dir, {context.model.dtype(), context.model.device(), false});
}

}  // namespace

absl::Status RunGrpoStage(TrainContext& context) {
  const config::RunConfig& config = context.config;
  const config::GrpoStageSection& stage = config.train.grpo;
  AdamW optimizer(context.model.NamedParameters(),
                  {stage.beta1, stage.beta2, stage.eps, stage.weight_decay});
  rollout::EngineOptions engine_options =
      rollout::EngineOptionsFromConfig(config.rollout, static_cast<uint64_t>(config.run.seed));
  engine_options.initial_version = context.policy_version;
  auto engine = rollout::RolloutEngine::Create(context.model, engine_options);
  if (!engine.ok()) return engine.status();
  auto dispatcher = dispatch::Dispatcher::Create(dispatch::DispatchOptions::FromConfig(
      config.async, config.effort, config.tasks, static_cast<uint64_t>(config.run.seed)));
  if (!dispatcher.ok()) return dispatcher.status();
  auto think_end = context.tokenizer.TokenToId(tokenizer::dsv4::kThinkClose);
  auto reference = LoadReference(context);
  if (!reference.ok()) return reference.status();
  GrpoStep trainer(context, optimizer,
                   algo::EffortLengthReward(config.grpo.length_reward, config.effort.levels),
                   think_end ? *think_end : -1, reference->get());

  std::map<uint64_t, SampleInfo> sample_info;
  std::map<uint64_t, rollout::SampleState> finished;
  auto agent_stage = AgentStage::Create(context, **engine);
  if (!agent_stage.ok()) return agent_stage.status();
  AgentRollout* agents = (*agent_stage) ? (*agent_stage)->rollout() : nullptr;
  EnginePort port(context, **engine, sample_info, agents);
  metrics::ProgressLine progress(stdout, {static_cast<bool>(::isatty(1)), 0.2, 30.0});
  const int64_t eval_every = config.tasks.eval_every;
  RolloutTotals rollout_totals;
  int64_t step = 0;
  GrpoLoopState loop{**engine, **dispatcher, optimizer, sample_info, finished, rollout_totals, step};
  if (absl::Status s = RestoreGrpo(context, loop); !s.ok()) return s;
  double rollout_start = Seconds();

  while (step < stage.steps) {
    if (absl::Status s = GrpoBoundary(context, loop, /*after_step=*/false); !s.ok()) return s;
    const int admitted = (*dispatcher)->Refill(port);
    ReportFailures(port.TakeFailures(), **dispatcher, sample_info);
    if (agents != nullptr) {
      // Wait for the workers only when the engine has nothing to run.
      const bool idle = (*engine)->num_running() + (*engine)->num_waiting() == 0;
      for (AgentResult& result : agents->Pump(idle ? 0.05 : 0)) {
        const uint64_t id = result.state.id;
        auto info = sample_info.find(id);
        LOOM_CHECK(info != sample_info.end(), "agent sample " << id);
        info->second.trajectory =
            std::make_shared<const v1::Trajectory>(std::move(result.trajectory));
        if (absl::Status s = (*agent_stage)->Log(result.state, info->second); !s.ok()) return s;
        if ((*dispatcher)->OnSampleFinished(id) == dispatch::Disposition::kKeep) {
          finished.emplace(id, std::move(result.state));
        } else {
          sample_info.erase(info);
        }
      }
    }
    if ((*engine)->num_samples() > 0) {
      auto stats = (*engine)->Step();
      if (!stats.ok()) return stats.status();
      rollout_totals.decode_tokens += stats->decode_tokens;
      rollout_totals.prefill_tokens += stats->prefill_tokens;
      if (agents != nullptr) agents->OnStopped(stats->tool_wait);
    }
    for (rollout::SampleState& sample : (*engine)->TakeFinished()) {
      if (agents != nullptr && agents->Hold(sample)) continue;
      const uint64_t id = sample.id;
      if ((*dispatcher)->OnSampleFinished(id) == dispatch::Disposition::kKeep) {
        finished.emplace(id, std::move(sample));
      } else {
        sample_info.erase(id);
      }
    }
    auto batch = (*dispatcher)->TakeBatch(context.policy_version);
    if (!batch) {
      const int64_t episodes = agents != nullptr ? agents->inflight() : 0;
      if ((*engine)->num_samples() == 0 && admitted == 0 && episodes == 0) {
        return absl::InternalError("GRPO loop stalled: nothing in flight, nothing to dispatch, "
                                   "no batch ready (check async.* and effort.* settings)");
      }
      continue;
    }
    rollout_totals.seconds += Seconds() - rollout_start;
    (*engine)->ParkAll();
    if (config.rollout.offload_parked) (*engine)->OffloadParked();

    std::vector<TrainingSample> samples;
    for (const dispatch::ReadySubgroup& subgroup : *batch) {
      for (uint64_t id : subgroup.sample_ids) {
        auto state = finished.find(id);
        auto info = sample_info.find(id);
        LOOM_CHECK(state != finished.end() && info != sample_info.end(), "sample " << id);
        samples.push_back({std::move(state->second), info->second});
        finished.erase(state);
        sample_info.erase(info);
      }
    }
    auto record = trainer.Train(samples, step, (*dispatcher)->TakeStats(), rollout_totals);
    if (!record.ok()) return record.status();
    (*record)["prefill_tokens"] = rollout_totals.prefill_tokens;
    (*record)["decode_tokens"] = rollout_totals.decode_tokens;
    rollout_totals = {};
    ++step;
    if (absl::Status s = (*engine)->Resume(context.policy_version); !s.ok()) return s;
    if (absl::Status s = context.metrics.Write(*record); !s.ok()) return s;

    char text[200];
    std::snprintf(text, sizeof text, "grpo step %lld | reward %.3f | in flight %lld",
                  static_cast<long long>(step), (*record)["reward_mean"].get<double>(),
                  static_cast<long long>((*dispatcher)->inflight()));
    progress.Update(text, step, stage.steps);
    if (step == stage.steps || (eval_every > 0 && step % eval_every == 0)) {
      progress.Finish();
      if (absl::Status s = LogEvaluation(context, "grpo", step); !s.ok()) return s;
    }
    if (absl::Status s = GrpoBoundary(context, loop, /*after_step=*/true); !s.ok()) return s;
    rollout_start = Seconds();
  }
  progress.Finish();
  return absl::OkStatus();
}

}  // namespace loom::train
