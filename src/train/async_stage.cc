#include "train/async_stage.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "loom/agent/rollout.h"
#include "loom/config/check.h"
#include "loom/metrics/progress.h"
#include "loom/tasks/agent_tasks.h"
#include "loom/train/control.h"
#include "loom/train/encoding.h"
#include "loom/train/evaluator.h"
#include "loom/train/live_config.h"
#include "loom/train/preemption.h"
#include "loom/v1/sandbox.pb.h"
#include "train/agent_stage.h"
#include "train/stage_checkpoint.h"

namespace loom::train {
namespace {

// The real engine as the dispatcher sees it: admitting a prompt group encodes
// its problem once per effort, records every sample in the table and adds it
// to the engine (with its dataset's teacher, in OPD); a sandbox dataset's samples start their
// episodes instead (their prompts come from the worker). A sample that cannot start is reported to
// the table as failed.
class EnginePort : public dispatch::RolloutPort {
 public:
  EnginePort(const TrainContext& context, AsyncLoop& loop, AgentStage* agents, bool teachers)
      : context_(context), loop_(loop), agents_(agents), teachers_(teachers) {}

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
        if (teachers_) entry.teacher = context_.live->TeacherSlot(group.dataset);
        loop_.table().Admit(std::move(entry));
        if (!prompt.ok()) {
          loop_.table().Fail(ticket.sample_id, prompt.status());
          continue;
        }
        if (agent) {
          StartEpisode(*loop_.table().Find(ticket.sample_id));
        } else if (absl::Status s = loop_.engine().Add(Request(ticket.sample_id, *prompt));
                   !s.ok()) {
          loop_.table().Fail(ticket.sample_id, s);
        }
      }
    }
  }

  // Starts an agent sample's episode; its prompt comes from the worker.
  void StartEpisode(const SampleEntry& entry) { ContinueEpisode(entry, std::nullopt); }

  // A resumed run: attaches again to an episode `record` describes, or
  // without one starts the episode again.
  void ContinueEpisode(const SampleEntry& entry, std::optional<agent::EpisodeRecord> record) {
    LOOM_CHECK(agents_ != nullptr, "sandbox dataset without sandbox clients");
    const config::DatasetSection& spec = context_.config.tasks.datasets[entry.dataset];
    v1::Task task = tasks::BuiltinTask(spec.kind, entry.problem->task_seed);
    const int effort = context_.config.effort.PromptEffort(entry.effort);
    if (record) {
      agents_->rollout()->Resume(Request(entry.id, {}), task, effort, *std::move(record));
    } else {
      agents_->rollout()->Start(Request(entry.id, {}), task, effort);
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
  bool teachers_;       // opd: record each sample's teacher slot
};

// Per-step reporting: the metrics line, the progress line, a line per
// trained sample, and held-out evaluation every tasks.eval_every steps and at
// the end.
class StepReport {
 public:
  StepReport(TrainContext& context, const AsyncLoop& loop, const AsyncStageSpec& spec,
             metrics::MetricsWriter& samples)
      : context_(context),
        loop_(loop),
        spec_(spec),
        samples_(samples),
        progress_(context.rank() == 0 ? stdout : nullptr,
                  {static_cast<bool>(::isatty(1)), 0.2, 30.0}) {}
  ~StepReport() { progress_.Finish(); }

  // samples.jsonl: where each trained sample came from, the config version
  // it was dispatched under, (opd) its teacher and (agents) its episode.
  absl::Status Trained(const Batch& batch) {
    const std::vector<algo::TeacherSpec>& teachers = context_.live->teacher_slots();
    for (const TrainingSample& sample : batch.samples) {
      const SampleEntry& info = sample.info;
      nlohmann::json line = {
          {"stage", spec_.stage},
          {"step", batch.step + 1},
          {"id", info.id},
          {"dataset", context_.config.tasks.datasets[info.dataset].name},
          {"effort", info.effort},
          {"config_version", info.config_version},
          {"first_token_version",
           sample.state.segments.empty() ? -1 : sample.state.segments.front().version},
          {"generated_tokens", sample.state.generated}};
      if (info.trajectory != nullptr) {
        const v1::Trajectory& t = *info.trajectory;
        line["episode"] = {{"steps", t.steps()},
                           {"format_errors", t.format_errors()},
                           {"failure_reason", t.failure_reason()},
                           {"repercussion", t.repercussion()},
                           {"reward", t.verdict().reward()}};
      }
      if (info.teacher >= 0) {
        line["teacher"] = teachers.at(info.teacher).name;
        line["teacher_path"] = teachers.at(info.teacher).path;
      }
      if (absl::Status s = samples_.Write(line); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status operator()(int64_t step, nlohmann::json record) {
    for (size_t d = 0; d < context_.datasets.size(); ++d) {
      record["inflight_by_dataset"][context_.config.tasks.datasets[d].name] =
          loop_.dispatcher().inflight(static_cast<int>(d));
    }
    if (absl::Status s = context_.metrics.Write(record); !s.ok()) return s;
    const int64_t steps = spec_.optimizer->steps;
    const int64_t eval_every = context_.live->config().tasks.eval_every;
    char text[200];
    const auto headline = record.find(spec_.headline);
    std::snprintf(text, sizeof text, "%s step %lld | %s %.3f | in flight %lld", spec_.stage,
                  static_cast<long long>(step), spec_.headline,
                  headline != record.end() && headline->is_number() ? headline->get<double>() : 0.0,
                  static_cast<long long>(loop_.dispatcher().inflight()));
    progress_.Update(
        text, step, steps,
        context_.run_eta != nullptr ? context_.run_eta->Text(context_.policy_version) : "");
    if (step == steps || (eval_every > 0 && step % eval_every == 0)) {
      progress_.Finish();
      return LogEvaluation(context_, spec_.stage, step);
    }
    return absl::OkStatus();
  }

 private:
  TrainContext& context_;
  const AsyncLoop& loop_;
  const AsyncStageSpec& spec_;
  metrics::MetricsWriter& samples_;
  metrics::ProgressLine progress_;
};

// This rank's share of the dispatch settings: every rank dispatches and
// trains batch_samples / ranks samples per step, with max_inflight / ranks in
// flight. INVALID_ARGUMENT naming the key when the share is not whole.
absl::Status ShareAmongRanks(dispatch::DispatchOptions& options, int rank, int ranks) {
  if (ranks == 1) return absl::OkStatus();
  for (const auto& [key, value] :
       {std::pair<const char*, int>{"async.batch_samples", options.batch_samples},
        {"async.max_inflight", options.max_inflight}}) {
    if (value % ranks != 0) {
      return absl::InvalidArgumentError(absl::StrCat(key, " (", value, ") does not divide among ",
                                                     ranks, " ranks: each rank takes a share"));
    }
  }
  options.batch_samples /= ranks;
  options.max_inflight /= ranks;
  options.warmup_drop_samples /= ranks;
  for (dispatch::DatasetQuota& d : options.datasets) d.max_inflight /= ranks;
  options.rank = rank;
  options.ranks = ranks;
  return absl::OkStatus();
}

}  // namespace

absl::Status RunAsyncStage(TrainContext& context, const AsyncStageSpec& spec) {
  const config::RunConfig& config = context.config;
  AsyncLoop::Options options;
  options.engine =
      rollout::EngineOptionsFromConfig(config.rollout, static_cast<uint64_t>(config.run.seed));
  options.engine.initial_version = context.policy_version;
  LOOM_CHECK(context.live != nullptr, "stage " << spec.stage << " without the live config");
  options.dispatch = dispatch::DispatchOptions::FromConfig(
      config.async, config.effort, config.tasks, static_cast<uint64_t>(config.run.seed));
  options.dispatch.datasets = context.live->datasets();  // the live mix, not the file's
  if (absl::Status s = ShareAmongRanks(options.dispatch, context.rank(), context.world_size());
      !s.ok()) {
    return s;
  }
  options.group = context.group;
  options.offload_parked = config.rollout.offload_parked;
  auto loop = AsyncLoop::Create(context.model, options);
  if (!loop.ok()) return loop.status();

  StageOptimizer optimizer(context.model, *spec.optimizer, context.group, context.bucket_bytes());
  auto trainer = spec.make_trainer(optimizer);
  if (!trainer.ok()) return trainer.status();
  auto agents = AgentStage::Create(context, (*loop)->engine());
  if (!agents.ok()) return agents.status();
  (*loop)->set_agents(agents->get());
  EnginePort port(context, **loop, agents->get(), spec.teachers);

  int64_t step = 0;
  AsyncStageState state{spec.stage, **loop, optimizer.adamw(), step};
  if (absl::Status s =
          RestoreAsync(context, state,
                       [&](const SampleEntry& entry, std::optional<agent::EpisodeRecord> record) {
                         port.ContinueEpisode(entry, std::move(record));
                       });
      !s.ok()) {
    return s;
  }
  auto samples = metrics::MetricsWriter::Open(context.run_dir.samples_path());
  if (!samples.ok()) return samples.status();
  StepReport report(context, **loop, spec, *samples);
  LoopHooks hooks;
  hooks.boundary = [&](bool after_step) {
    if (context.control != nullptr && context.control->Poll()) {
      // Validated by LiveConfig::Apply against the same rules.
      const absl::Status s = (*loop)->dispatcher().SetDatasets(context.live->datasets());
      LOOM_CHECK(s.ok(), "a live mix the dispatcher refuses: " << s.message());
    }
    return AsyncBoundary(context, state, after_step);
  };
  hooks.trained = [&](const Batch& batch) { return report.Trained(batch); };
  hooks.after_step = [&](int64_t done, const nlohmann::json& record) {
    return report(done, record);
  };
  absl::Status ran =
      (*loop)->Run(port, **trainer, step, spec.optimizer->steps, context.policy_version, hooks);
  if (*agents != nullptr && IsPreempted(ran)) (*agents)->Preempted();
  return ran;
}

}  // namespace loom::train
