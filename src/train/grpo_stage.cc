#include "loom/train/grpo_stage.h"

#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "loom/agent/rollout.h"
#include "loom/algo/length_reward.h"
#include "loom/config/check.h"
#include "loom/metrics/progress.h"
#include "loom/tasks/agent_tasks.h"
#include "loom/train/async_loop.h"
#include "loom/train/encoding.h"
#include "loom/train/evaluator.h"
#include "loom/train/grpo_step.h"
#include "loom/train/live_config.h"
#include "loom/train/stage_checkpoint.h"
#include "loom/train/stage_optimizer.h"
#include "train/agent_stage.h"

namespace loom::train {
namespace {

// The real engine as the dispatcher sees it: admitting a prompt group encodes
// its problem once per effort, records every sample in the table and adds it
// to the engine; a sandbox dataset's samples start their episodes instead
// (their prompts come from the worker). A sample that cannot start is
// reported to the table as failed.
class EnginePort : public dispatch::RolloutPort {
 public:
  EnginePort(const TrainContext& context, AsyncLoop& loop, AgentStage* agents)
      : context_(context), loop_(loop), agents_(agents) {}

  int64_t PolicyVersion() const override { return loop_.engine().policy_version(); }

  void Admit(const dispatch::PromptGroup& group) override {
    const auto& dataset = *context_.datasets[group.dataset];
    auto problem = std::make_shared<tasks::Problem>(dataset.Train(group.problem_index));
    const config::DatasetSection& spec = context_.config.tasks.datasets[group.dataset];
    const bool agent = spec.environment == "sandbox";
    for (const dispatch::Subgroup& subgroup : group.subgroups) {
      const int shown_effort = context_.config.effort.PromptEffort(subgroup.effort);
      absl::StatusOr<std::vector<int64_t>> prompt = std::vector<int64_t>();
      if (!agent) prompt = EncodeProblemPrompt(*problem, shown_effort, context_.tokenizer);
      for (const dispatch::SampleTicket& ticket : subgroup.samples) {
        SampleEntry entry;
        entry.id = ticket.sample_id;
        entry.subgroup_id = subgroup.id;
        entry.effort = subgroup.effort;
        entry.dataset = group.dataset;
        entry.problem_index = group.problem_index;
        entry.problem = problem;
        entry.agent = agent;
        entry.config_version = context_.live->version();
        loop_.table().Admit(std::move(entry));
        if (!prompt.ok()) {
          loop_.table().Fail(ticket.sample_id, prompt.status());
          continue;
        }
        rollout::SampleRequest request = Request(ticket.sample_id, *prompt);
        if (agent) {
          LOOM_CHECK(agents_ != nullptr, "sandbox dataset without sandbox clients");
          agents_->rollout()->Start(
              std::move(request), tasks::BuiltinTask(spec.kind, problem->task_seed), shown_effort);
        } else if (absl::Status s = loop_.engine().Add(request); !s.ok()) {
          loop_.table().Fail(ticket.sample_id, s);
        }
      }
    }
  }

 private:
  rollout::SampleRequest Request(uint64_t id, const std::vector<int64_t>& prompt) const {
    const config::RolloutSection& rollout = context_.config.rollout;
    rollout::SampleRequest request;
    request.id = id;
    request.prompt = prompt;
    request.sampling = {rollout.temperature, rollout.top_p, rollout.top_k};
    request.stop.max_new_tokens = rollout.max_new_tokens;
    request.stop.eos_token_ids = {context_.special_tokens.eos};
    return request;
  }

  const TrainContext& context_;
  AsyncLoop& loop_;
  AgentStage* agents_;  // null without sandbox datasets
};

// The frozen model of the KL penalty: the weights this stage started from, as
// saved on disk (the previous stage's output, or model.path when GRPO comes
// first), so a resumed run anchors to the same weights. Null when
// grpo.kl_coef is 0.
absl::StatusOr<std::unique_ptr<model::Transformer>> LoadReference(const TrainContext& context) {
  const config::RunConfig& config = context.config;
  if (config.grpo.kl_coef <= 0) return nullptr;
  const auto& stages = config.train.stages;
  const auto grpo = std::find(stages.begin(), stages.end(), kGrpoStage);
  const std::string dir =
      grpo == stages.begin() ? config.model.path : context.run_dir.stage_path(*std::prev(grpo));
  spdlog::info("grpo.kl_coef {}: KL reference from {}", config.grpo.kl_coef, dir);
  return model::Transformer::Load(dir, {context.model.dtype(), context.model.device(), false});
}

// Per-step reporting: the metrics line, the progress line, and held-out
// evaluation every tasks.eval_every steps and at the end.
class StepReport {
 public:
  StepReport(TrainContext& context, const AsyncLoop& loop)
      : context_(context),
        loop_(loop),
        progress_(stdout, {static_cast<bool>(::isatty(1)), 0.2, 30.0}) {}
  ~StepReport() { progress_.Finish(); }

  absl::Status operator()(int64_t step, const nlohmann::json& record) {
    if (absl::Status s = context_.metrics.Write(record); !s.ok()) return s;
    const int64_t steps = context_.config.train.grpo.steps;
    const int64_t eval_every = context_.config.tasks.eval_every;
    char text[200];
    std::snprintf(text, sizeof text, "grpo step %lld | reward %.3f | in flight %lld",
                  static_cast<long long>(step), record["reward_mean"].get<double>(),
                  static_cast<long long>(loop_.dispatcher().inflight()));
    progress_.Update(text, step, steps);
    if (step == steps || (eval_every > 0 && step % eval_every == 0)) {
      progress_.Finish();
      return LogEvaluation(context_, kGrpoStage, step);
    }
    return absl::OkStatus();
  }

 private:
  TrainContext& context_;
  const AsyncLoop& loop_;
  metrics::ProgressLine progress_;
};

}  // namespace

absl::Status RunGrpoStage(TrainContext& context) {
  const config::RunConfig& config = context.config;
  AsyncLoop::Options options;
  options.engine =
      rollout::EngineOptionsFromConfig(config.rollout, static_cast<uint64_t>(config.run.seed));
  options.engine.initial_version = context.policy_version;
  LOOM_CHECK(context.live != nullptr, "GRPO stage without the live config");
  options.dispatch = dispatch::DispatchOptions::FromConfig(
      config.async, config.effort, config.tasks, static_cast<uint64_t>(config.run.seed));
  options.dispatch.datasets = context.live->datasets();
  options.offload_parked = config.rollout.offload_parked;
  auto loop = AsyncLoop::Create(context.model, options);
  if (!loop.ok()) return loop.status();

  StageOptimizer optimizer(context.model, config.train.grpo);
  auto reference = LoadReference(context);
  if (!reference.ok()) return reference.status();
  GrpoTrainer trainer(context, optimizer,
                      algo::EffortLengthReward(config.grpo.length_reward, config.effort.levels),
                      context.special_tokens.think_end, reference->get());
  auto agents = AgentStage::Create(context, (*loop)->engine());
  if (!agents.ok()) return agents.status();
  (*loop)->set_agents(agents->get());
  EnginePort port(context, **loop, agents->get());

  int64_t step = 0;
  GrpoLoopState state{**loop, optimizer.adamw(), step};
  if (absl::Status s = RestoreGrpo(context, state); !s.ok()) return s;
  StepReport report(context, **loop);
  LoopHooks hooks;
  hooks.boundary = [&](bool after_step) { return GrpoBoundary(context, state, after_step); };
  hooks.after_step = [&](int64_t done, const nlohmann::json& record) {
    return report(done, record);
  };
  return (*loop)->Run(port, trainer, step, config.train.grpo.steps, context.policy_version, hooks);
}

}  // namespace loom::train
