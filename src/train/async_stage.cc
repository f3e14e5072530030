#include "train/async_stage.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "loom/config/check.h"
#include "loom/metrics/progress.h"
#include "loom/train/control.h"
#include "loom/train/evaluator.h"
#include "loom/train/live_config.h"
#include "loom/train/preemption.h"
#include "train/agent_stage.h"
#include "train/encoding.h"
#include "train/ledger_writer.h"
#include "train/stage_checkpoint.h"
#include "train/task_filter.h"

namespace loom::train {
namespace {

// The run's datasets as the loop's prompt source: a sample's problem comes
// from its dataset, its prompt is that problem encoded at the effort its
// subgroup shows (once per subgroup), and in OPD it gets its dataset's
// teacher. A sandbox dataset's samples are the agent environment's: their
// prompts come from the worker.
class DatasetPrompts : public PromptSource {
 public:
  DatasetPrompts(const TrainContext& context, bool teachers)
      : context_(context), teachers_(teachers) {}

  Prompt Open(const dispatch::PromptGroup& group, const dispatch::Subgroup& subgroup,
              const dispatch::SampleTicket&) override {
    if (group.prompt_id != group_ || !problem_) {
      group_ = group.prompt_id;
      problem_ = std::make_shared<tasks::Problem>(
          context_.datasets[group.dataset]->Train(group.problem_index));
      subgroup_.reset();
    }
    Prompt prompt;
    prompt.entry.effort = subgroup.effort;
    prompt.entry.dataset = group.dataset;
    prompt.entry.problem_index = group.problem_index;
    prompt.entry.problem = problem_;
    prompt.entry.agent = context_.config.tasks.datasets[group.dataset].environment == "sandbox";
    prompt.entry.config_version = context_.live.version();
    if (teachers_) prompt.entry.teacher = context_.live.TeacherSlot(group.dataset);
    prompt.request = Request();
    if (prompt.entry.agent) return prompt;
    if (subgroup_ != subgroup.id) {
      subgroup_ = subgroup.id;
      encoded_ = EncodeProblemPrompt(
          *problem_, context_.config.effort.PromptEffort(subgroup.effort), context_.tokenizer);
    }
    if (!encoded_.ok()) {
      prompt.request = encoded_.status();
    } else {
      prompt.request->prompt = *encoded_;
    }
    return prompt;
  }

  absl::StatusOr<rollout::SampleRequest> Reopen(SampleEntry& entry) override {
    const auto& datasets = context_.config.tasks.datasets;
    const std::string sample = "checkpoint sample " + std::to_string(entry.id);
    if (entry.dataset < 0 || entry.dataset >= static_cast<int>(datasets.size())) {
      return absl::DataLossError(sample + ": dataset " + std::to_string(entry.dataset) +
                                 " does not exist in this config");
    }
    if (entry.agent && datasets[entry.dataset].environment != "sandbox") {
      return absl::FailedPreconditionError(sample + " is an agent episode but dataset '" +
                                           datasets[entry.dataset].name +
                                           "' has no `environment: sandbox` now");
    }
    entry.problem = std::make_shared<tasks::Problem>(
        context_.datasets[entry.dataset]->Train(entry.problem_index));
    return Request();
  }

 private:
  rollout::SampleRequest Request() const {
    const config::RolloutSection& rollout = context_.config.rollout;
    rollout::SampleRequest request;
    request.sampling = {rollout.temperature, rollout.top_p, rollout.top_k};
    request.stop.max_new_tokens = rollout.max_new_tokens;
    request.stop.eos_token_ids = {context_.special_tokens.eos};
    return request;
  }

  const TrainContext& context_;
  bool teachers_;  // opd: record each sample's teacher slot
  // The problem of the prompt group being admitted, and its prompt at the
  // effort of the subgroup being admitted.
  uint64_t group_ = 0;
  std::shared_ptr<tasks::Problem> problem_;
  std::optional<uint64_t> subgroup_;
  absl::StatusOr<std::vector<int64_t>> encoded_ = std::vector<int64_t>();
};

// Per-step reporting: the metrics line, the progress line, a line per
// trained sample, and held-out evaluation every tasks.eval_every steps and at
// the end.
class StepReport {
 public:
  StepReport(TrainContext& context, const AsyncLoop& loop, const AsyncStageSpec& spec,
             metrics::MetricsWriter& samples, const TaskFilter& filter)
      : context_(context),
        loop_(loop),
        spec_(spec),
        samples_(samples),
        filter_(filter),
        progress_(context.rank() == 0 ? stdout : nullptr,
                  {static_cast<bool>(::isatty(1)), 0.2, 30.0}) {}
  ~StepReport() { progress_.Finish(); }

  // samples.jsonl: where each trained sample came from, the config version
  // it was dispatched under, (opd) its teacher and (agents) its episode; and
  // the step's attempts (BatchAttempts) into the task ledger.
  absl::Status Trained(const Batch& batch, std::vector<tasks::LedgerAttempt> attempts) {
    const std::vector<algo::TeacherSpec>& teachers = context_.live.teacher_slots();
    for (const TrainingSample& sample : batch.samples) {
      const SampleEntry& info = sample.info;
      const config::DatasetSection& dataset = context_.config.tasks.datasets[info.dataset];
      int64_t generated = sample.state.generated;
      for (const rollout::SampleState& sequence : info.sequences) generated += sequence.generated;
      nlohmann::json line = {
          {"stage", spec_.stage},
          {"step", batch.step + 1},
          {"id", info.id},
          {"subgroup", info.subgroup_id},
          {"dataset", dataset.name},
          {"effort", info.effort},
          {"config_version", info.config_version},
          {"first_token_version",
           sample.state.segments.empty() ? -1 : sample.state.segments.front().version},
          {"generated_tokens", generated}};
      if (dataset.harness != "builtin") {
        line["harness"] = dataset.harness;
        line["sequences"] = sample.state.length() > 0 ? 1 + info.sequences.size() : 0;
      }
      if (info.outcome) {
        const agent::EpisodeOutcome& o = *info.outcome;
        line["episode"] = {{"steps", o.steps},
                           {"format_errors", o.format_errors},
                           {"failure_reason", o.failure_reason},
                           {"repercussion", o.repercussion},
                           {"reward", o.reward}};
      }
      if (info.teacher >= 0) {
        line["teacher"] = teachers.at(info.teacher).name;
        line["teacher_path"] = teachers.at(info.teacher).path;
      }
      if (absl::Status s = samples_.Write(line); !s.ok()) return s;
    }
    return context_.ledger != nullptr ? context_.ledger->Trained(std::move(attempts))
                                      : absl::OkStatus();
  }

  absl::Status operator()(int64_t step, nlohmann::json record) {
    for (size_t d = 0; d < context_.datasets.size(); ++d) {
      record["inflight_by_dataset"][context_.config.tasks.datasets[d].name] =
          loop_.dispatcher().inflight(static_cast<int>(d));
    }
    if (context_.ledger != nullptr) context_.ledger->AddStepFigures(record);
    filter_.AddStepFigures(record, loop_.dispatcher());
    if (absl::Status s = context_.metrics.Write(record); !s.ok()) return s;
    const int64_t steps = spec_.optimizer->steps;
    const int64_t eval_every = context_.live.config().tasks.eval_every;
    char text[200];
    const auto headline = record.find(spec_.headline);
    std::snprintf(text, sizeof text, "%s step %lld | %s %.3f | in flight %lld", spec_.stage,
                  static_cast<long long>(step), spec_.headline,
                  headline != record.end() && headline->is_number() ? headline->get<double>() : 0.0,
                  static_cast<long long>(loop_.dispatcher().inflight()));
    progress_.Update(text, step, steps, context_.run_eta.Text(context_.policy_version));
    if (step == steps || (eval_every > 0 && step % eval_every == 0)) {
      progress_.Finish();
      return context_.LogEvaluation(spec_.stage, step);
    }
    return absl::OkStatus();
  }

  // The stage ended at `step`, before its last, with every task retired: it
  // is evaluated there, as at its end, unless the step just was.
  absl::Status EndedEarly(int64_t step) {
    const int64_t eval_every = context_.live.config().tasks.eval_every;
    if (step > 0 && eval_every > 0 && step % eval_every == 0) return absl::OkStatus();
    progress_.Finish();
    return context_.LogEvaluation(spec_.stage, step);
  }

 private:
  TrainContext& context_;
  const AsyncLoop& loop_;
  const AsyncStageSpec& spec_;
  metrics::MetricsWriter& samples_;
  const TaskFilter& filter_;
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
  options.dispatch = dispatch::DispatchOptions::FromConfig(
      config.async, config.effort, config.tasks, static_cast<uint64_t>(config.run.seed));
  options.dispatch.datasets = context.live.datasets();  // the live mix, not the file's
  TaskFilter filter(context);
  filter.Configure(options.dispatch);
  if (absl::Status s = ShareAmongRanks(options.dispatch, context.rank(), context.world_size());
      !s.ok()) {
    return s;
  }
  options.group = context.group;
  options.offload_parked = config.rollout.offload_parked;
  options.environment =
      [&](rollout::RolloutEngine& engine) -> absl::StatusOr<std::unique_ptr<SampleEnvironment>> {
    auto agents = AgentStage::Create(context, engine);
    if (!agents.ok()) return agents.status();
    return std::unique_ptr<SampleEnvironment>(*std::move(agents));
  };
  auto loop = AsyncLoop::Create(context.model, options);
  if (!loop.ok()) return loop.status();

  StageOptimizer optimizer(context.model, *spec.optimizer, context.group, context.bucket_bytes());
  auto trainer = spec.make_trainer(optimizer);
  if (!trainer.ok()) return trainer.status();
  DatasetPrompts prompts(context, spec.teachers);
  if (absl::Status s = filter.Seed((*loop)->dispatcher()); !s.ok()) return s;
  AsyncStageState state{spec.stage, **loop, optimizer.adamw()};
  if (absl::Status s = RestoreAsync(context, state, prompts); !s.ok()) return s;
  auto samples = metrics::MetricsWriter::Open(context.run_dir.samples_path());
  if (!samples.ok()) return samples.status();
  StepReport report(context, **loop, spec, *samples, filter);
  LoopHooks hooks;
  hooks.boundary = [&](bool after_step) {
    if (context.control != nullptr && context.control->Poll(context.policy_version)) {
      (*loop)->SetDatasets(context.live.datasets());
    }
    return AsyncBoundary(context, state, after_step);
  };
  hooks.trained = [&](const Batch& batch) {
    std::vector<tasks::LedgerAttempt> attempts;  // each sample judged once, for both
    if (context.ledger != nullptr || filter.on()) {
      attempts = BatchAttempts(batch, config, context.tokenizer);
    }
    if (absl::Status s = filter.Trained(batch, attempts, (*loop)->dispatcher(), batch.step + 1);
        !s.ok()) {
      return s;
    }
    return report.Trained(batch, std::move(attempts));
  };
  hooks.after_step = [&](int64_t done, const nlohmann::json& record) {
    context.policy_version = (*loop)->policy_version();  // the loop counts them while it runs
    return report(done, record);
  };
  absl::Status ran = (*loop)->Run(prompts, **trainer, spec.optimizer->steps, hooks);
  if (IsPreempted(ran)) (*loop)->Preempted();
  if (ran.ok() && (*loop)->every_task_retired()) return report.EndedEarly((*loop)->step());
  return ran;
}

}  // namespace loom::train
