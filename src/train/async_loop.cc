#include "loom/train/async_loop.h"

#include <algorithm>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/config/check.h"
#include "loom/metrics/progress.h"

namespace loom::train {
namespace {}  // namespace

void MaskInfrastructureFailures(std::vector<TrainingSample>& samples,
                                std::map<std::string, int64_t>& by_cause,
                                std::vector<TrainingSample>* masked) {
  auto infrastructure = [](const TrainingSample& sample) {
    return sample.info.outcome && sample.info.outcome->infrastructure;
  };
  auto kept = std::stable_partition(samples.begin(), samples.end(),
                                    [&](const TrainingSample& s) { return !infrastructure(s); });
  for (auto it = kept; it != samples.end(); ++it) {
    ++by_cause[it->info.outcome->cause()];
    if (masked != nullptr) masked->push_back(std::move(*it));
  }
  samples.erase(kept, samples.end());
}

absl::StatusOr<std::unique_ptr<AsyncLoop>> AsyncLoop::Create(const model::Transformer& model,
                                                             const Options& options) {
  auto engine = rollout::RolloutEngine::Create(model, options.engine);
  if (!engine.ok()) return engine.status();
  auto dispatcher = dispatch::Dispatcher::Create(options.dispatch);
  if (!dispatcher.ok()) return dispatcher.status();
  std::unique_ptr<AsyncLoop> loop(
      new AsyncLoop(*std::move(engine), *std::move(dispatcher), options));
  if (options.environment) {
    auto environment = options.environment(*loop->engine_);
    if (!environment.ok()) return environment.status();
    loop->environment_ = *std::move(environment);
  }
  return loop;
}

void AsyncLoop::Admit(const dispatch::PromptGroup& group) {
  for (const dispatch::Subgroup& subgroup : group.subgroups) {
    for (const dispatch::SampleTicket& ticket : subgroup.samples) {
      PromptSource::Prompt prompt = source_->Open(group, subgroup, ticket);
      prompt.entry.id = ticket.sample_id;
      prompt.entry.subgroup_id = subgroup.id;
      table_.Admit(prompt.entry);
      if (!prompt.request.ok()) {
        table_.Fail(ticket.sample_id, prompt.request.status());
        continue;
      }
      prompt.request->id = ticket.sample_id;
      if (prompt.entry.agent) {
        LOOM_CHECK(environment_ != nullptr, "an environment's sample in a loop without one");
        environment_->Start(prompt.entry, *std::move(prompt.request));
      } else if (absl::Status s = engine_->Add(*prompt.request); !s.ok()) {
        table_.Fail(ticket.sample_id, s);
      }
    }
  }
}

void AsyncLoop::SetDatasets(const std::vector<dispatch::DatasetQuota>& datasets) {
  const absl::Status s = dispatcher_->SetDatasets(datasets);
  LOOM_CHECK(s.ok(), "a live mix the dispatcher refuses: " << s.message());
}

void AsyncLoop::Preempted() {
  if (environment_ != nullptr) environment_->Preempted();
}

void AsyncLoop::DropFailures() {
  std::set<const tasks::Problem*> warned;
  for (const auto& [id, status] : table_.TakeFailures()) {
    const SampleEntry* entry = table_.Find(id);
    LOOM_CHECK(entry != nullptr, "failed sample " << id << " is not in the table");
    const tasks::Problem& problem = *entry->problem;
    if (warned.insert(&problem).second) {
      spdlog::warn("dataset '{}': problem {} could not start, its prompt group is dropped: {}",
                   problem.dataset, problem.Describe(), std::string(status.message()));
    }
    dispatcher_->OnSampleFailed(id);
    ++finished_;
    table_.Erase(id);
  }
}

void AsyncLoop::Finished(uint64_t id, rollout::SampleState state) {
  ++finished_;
  if (dispatcher_->OnSampleFinished(id) == dispatch::Disposition::kKeep) {
    table_.Finish(id, std::move(state));
  } else {
    table_.Erase(id);
  }
}

absl::Status AsyncLoop::CollectEpisodes() {
  // Wait for the workers only when the engine has nothing to run.
  const bool idle = engine_->num_running() + engine_->num_waiting() == 0;
  auto ended = environment_->Pump(idle ? 0.05 : 0, table_);
  if (!ended.ok()) return ended.status();
  for (SampleEnvironment::Ended& episode : *ended) {
    const uint64_t id = episode.state.id;
    SampleEntry* entry = table_.Find(id);
    LOOM_CHECK(entry != nullptr, "environment sample " << id);
    entry->outcome = std::move(episode.outcome);
    entry->sequences = std::move(episode.sequences);
    Finished(id, std::move(episode.state));
  }
  return absl::OkStatus();
}

absl::Status AsyncLoop::StepEngine() {
  if (engine_->num_samples() > 0) {
    auto stats = engine_->Step();
    if (!stats.ok()) return stats.status();
    totals_.decode_tokens += stats->decode_tokens;
    totals_.prefill_tokens += stats->prefill_tokens;
    totals_.prefix_hit_tokens += stats->prefix_hit_tokens;
    if (environment_ != nullptr) environment_->Stopped(stats->tool_wait);
  }
  for (rollout::SampleState& sample : engine_->TakeFinished()) {
    if (environment_ != nullptr && environment_->Hold(sample)) continue;
    const uint64_t id = sample.id;
    Finished(id, std::move(sample));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::vector<TrainingSample>>> AsyncLoop::NextBatch(bool retired_out) {
  bool ready = dispatcher_->BatchReady(policy_version_);
  waiting_for_ranks_ = false;
  every_task_retired_ = retired_out && !ready;  // this rank can never make a batch again
  if (group_ != nullptr && group_->size() > 1) {
    // Whether some rank has no batch yet, and whether some rank never will
    // (then no step can meet again), in one collective.
    auto any = group_->Max({ready ? 0.0 : 1.0, every_task_retired_ ? 1.0 : 0.0});
    if (!any.ok()) return any.status();
    const bool waiting = (*any)[0] > 0;
    every_task_retired_ = (*any)[1] > 0;
    waiting_for_ranks_ = ready && waiting && !every_task_retired_;
    ready = !waiting;
  }
  if (!ready) return std::nullopt;
  auto taken = dispatcher_->TakeBatch(policy_version_);
  LOOM_CHECK(taken.has_value(), "a batch the dispatcher called ready could not be taken");
  std::vector<TrainingSample> samples = table_.Take(*taken);
  MaskInfrastructureFailures(samples, masked_, &masked_samples_);
  // All lost to infrastructure: alone, wait for more; among ranks, train on
  // nothing, so that the step's collectives still meet.
  if (samples.empty() && (group_ == nullptr || group_->size() == 1)) return std::nullopt;
  return samples;
}

absl::Status AsyncLoop::Run(PromptSource& source, BatchTrainer& trainer, int64_t steps,
                            const LoopHooks& hooks) {
  source_ = &source;
  double rollout_start = metrics::ProgressLine::SteadySeconds();
  while (step_ < steps) {
    if (hooks.boundary) {
      if (absl::Status s = hooks.boundary(/*after_step=*/false); !s.ok()) return s;
    }
    const int admitted = dispatcher_->Refill(*this);
    const int64_t finished_before = finished_;
    DropFailures();
    const double inflight = static_cast<double>(engine_->num_samples());
    ++inflight_.count;
    inflight_.sum += inflight;
    inflight_.sum_sq += inflight * inflight;
    if (environment_ != nullptr) {
      if (absl::Status s = CollectEpisodes(); !s.ok()) return s;
    }
    if (absl::Status s = StepEngine(); !s.ok()) return s;

    // Samples that finished in this iteration may have made room for the
    // next refill: only an iteration with no change at all is a stall.
    const int64_t episodes = environment_ != nullptr ? environment_->inflight() : 0;
    const bool idle = engine_->num_samples() == 0 && admitted == 0 && episodes == 0 &&
                      finished_ == finished_before;
    auto ready = NextBatch(idle && !dispatcher_->ExhaustedDatasets().empty());
    if (!ready.ok()) return ready.status();
    if (every_task_retired_) {
      spdlog::warn(
          "every task left to draw is retired (tasks.datasets[].filter: {}): the stage ends "
          "after {} of {} steps",
          absl::StrJoin(dispatcher_->ExhaustedDatasets(), ", "), step_, steps);
      return absl::OkStatus();
    }
    if (!*ready) {
      if (waiting_for_ranks_) continue;
      if (idle) {
        return absl::InternalError(absl::StrCat(
            "run loop stalled: nothing in flight, nothing to dispatch, no batch ready (the "
            "dispatcher counts ",
            dispatcher_->inflight(), " samples in flight and ", dispatcher_->ready_samples(),
            " ready, the sample table holds ", table_.entries().size(),
            "; check async.* and effort.* settings)"));
      }
      continue;
    }
    totals_.seconds += metrics::ProgressLine::SteadySeconds() - rollout_start;
    if (absl::Status s = TrainStep(**std::move(ready), trainer, hooks); !s.ok()) return s;
    rollout_start = metrics::ProgressLine::SteadySeconds();
  }
  return absl::OkStatus();
}

absl::Status AsyncLoop::TrainStep(std::vector<TrainingSample> samples, BatchTrainer& trainer,
                                  const LoopHooks& hooks) {
  engine_->ParkAll();
  if (offload_parked_) engine_->OffloadParked();

  Batch batch{std::move(samples),        step_,   policy_version_,
              dispatcher_->TakeStats(),  totals_, std::move(masked_),
              std::move(masked_samples_)};
  masked_.clear();
  masked_samples_.clear();
  if (environment_ != nullptr) environment_->BeforeWeightUpdate();
  auto trained = trainer.Train(batch);
  if (!trained.ok()) return trained.status();
  policy_version_ = trained->policy_version;
  if (environment_ != nullptr) {
    if (absl::Status s = environment_->AfterWeightUpdate(policy_version_); !s.ok()) return s;
  }
  nlohmann::json& record = trained->record;
  record["prefill_tokens"] = totals_.prefill_tokens;
  record["decode_tokens"] = totals_.decode_tokens;
  if (engine_->options().prefix_cache) {
    const model::KvBlockPool& pool = engine_->pool();
    record["prefix_hit_tokens"] = totals_.prefix_hit_tokens;
    record["prefix_shared_blocks"] = pool.shared_references();
    record["prefix_kv_bytes_saved"] = pool.shared_references() * pool.BytesPerBlock();
    record["prefix_evictions"] = pool.prefix_counters().evictions - prefix_evictions_;
    prefix_evictions_ = pool.prefix_counters().evictions;
  }
  std::set<int64_t> versions;
  for (const TrainingSample& sample : batch.samples) versions.insert(sample.info.config_version);
  record["batch_config_versions"] = versions;
  if (environment_ != nullptr) environment_->AddStepFigures(batch.masked_by_cause, record);
  if (hooks.trained) {
    if (absl::Status s = hooks.trained(batch); !s.ok()) return s;
  }
  totals_ = {};
  ++step_;
  if (absl::Status s = engine_->Resume(policy_version_); !s.ok()) return s;
  if (hooks.after_step) {
    if (absl::Status s = hooks.after_step(step_, record); !s.ok()) return s;
  }
  if (hooks.boundary) return hooks.boundary(/*after_step=*/true);
  return absl::OkStatus();
}

}  // namespace loom::train
