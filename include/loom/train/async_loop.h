#pragma once
// AsyncLoop: the one asynchronous run loop. It owns the rollout engine, the
// dispatcher, the sample table and the sample environment, and cycles
//
//   refill → engine step → finished → ready? → park → train → resume
//
// until the stage has taken its steps: the dispatcher admits prompt groups
// (the loop is its RolloutPort: each ticket's prompt and identity come from a
// PromptSource, the sample goes into the table and then into the engine, or
// into the environment for an agent episode), the engine generates one token
// step at a time, finished samples go back to the dispatcher (and into the
// table), and when a batch of complete subgroups is ready the engine is
// parked at a token boundary, a BatchTrainer takes one optimizer step on it,
// and the parked samples resume on their KV cache under the new policy
// version the trainer returns.
//
// What differs between stages plugs in: where prompts come from (the source:
// datasets, the dispatch bench's random prompts), how a batch is trained (the
// trainer: GRPO, OPD, the bench's), agent episodes (the environment), and
// hooks for checkpoints and per-step reporting. A checkpoint exports the
// loop's state between engine steps and a resumed run imports it
// (async_loop_state.cc). Run loop thread only.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/dispatch/dispatcher.h"
#include "loom/dist/group.h"
#include "loom/rollout/engine.h"
#include "loom/train/sample_environment.h"
#include "loom/train/sample_table.h"
#include "loom/train/train_state.h"

namespace loom::train {

// Rollout work since the previous step, for throughput metrics.
struct RolloutTotals {
  int64_t decode_tokens = 0;
  int64_t prefill_tokens = 0;
  int64_t prefix_hit_tokens = 0;  // prompt tokens taken from the prefix cache
  double seconds = 0;
};

// What a trainer gets: complete subgroups, in the order they became ready.
struct Batch {
  std::vector<TrainingSample> samples;
  int64_t step = 0;                  // 0-based optimizer step within the stage
  int64_t policy_version = 0;        // of the weights the batch trains (the step leaves + 1)
  dispatch::DispatchStats dispatch;  // concurrency since the previous step
  RolloutTotals rollout;             // rollout work since the previous step
  // Agent samples whose episodes failed for infrastructure reasons, taken
  // out of `samples` since the previous step, by cause.
  std::map<std::string, int64_t> masked_by_cause;
  std::vector<TrainingSample> masked;  // those samples (for the task ledger)
};

// Takes agent samples whose episodes failed for reasons outside the policy
// (the worker was lost, no worker took the episode, the trainer stopped
// answering: EpisodeOutcome::infrastructure) out of `samples`, counting them in `by_cause`
// under their failure reason's leading word ("worker_lost"). They carry no
// reward the policy earned, so they are kept out of the loss and out of their
// subgroup's baseline. Failures the agent causes (time or step limits,
// format errors, killed commands) stay: their verdicts are the policy's.
void MaskInfrastructureFailures(std::vector<TrainingSample>& samples,
                                std::map<std::string, int64_t>& by_cause,
                                std::vector<TrainingSample>* masked = nullptr);

// What a trainer's optimizer step produced.
struct TrainedStep {
  nlohmann::json record;       // the step's metrics line
  int64_t policy_version = 0;  // of the weights it left
};

class BatchTrainer {
 public:
  virtual ~BatchTrainer() = default;
  // One optimizer step on `batch`.
  virtual absl::StatusOr<TrainedStep> Train(const Batch& batch) = 0;
};

// Where the loop's samples come from: asked once per ticket the dispatcher
// admits, for the sample's identity and the request it is generated from.
class PromptSource {
 public:
  virtual ~PromptSource() = default;

  struct Prompt {
    SampleEntry entry;  // the loop sets its id and subgroup_id
    // The loop sets its id. For an environment's sample (entry.agent) the
    // prompt is empty: the environment supplies it. An error: the sample
    // cannot start, and its prompt group is dropped with a warning.
    absl::StatusOr<rollout::SampleRequest> request;
  };
  virtual Prompt Open(const dispatch::PromptGroup& group, const dispatch::Subgroup& subgroup,
                      const dispatch::SampleTicket& ticket) = 0;

  // A resumed run: `entry` as a checkpoint recorded it. Fills in its problem
  // and returns the request it was started from (its prompt empty), or
  // DATA_LOSS / FAILED_PRECONDITION when this run's datasets cannot have
  // produced it.
  virtual absl::StatusOr<rollout::SampleRequest> Reopen(SampleEntry& entry) = 0;
};

struct LoopHooks {
  // A checkpoint boundary: before every iteration (false) and right after
  // every optimizer step (true). A non-OK status ends the loop with it.
  std::function<absl::Status(bool after_step)> boundary;
  // After a trainer took its optimizer step on `batch`.
  std::function<absl::Status(const Batch& batch)> trained;
  // After optimizer step `steps_done` (1-based) and the engine's resume, with
  // its metrics line (the trainer's, plus prefill_tokens, decode_tokens and
  // batch_config_versions: the live config versions its samples were
  // dispatched under; more than one when a change fell inside the batch;
  // with agent samples, episodes_masked and episodes_masked_by_cause).
  std::function<absl::Status(int64_t steps_done, const nlohmann::json& record)> after_step;
};

// In-flight samples seen by the engine at every iteration, for the dispatch
// bench's concurrency figures.
struct InflightObservations {
  int64_t count = 0;
  double sum = 0, sum_sq = 0;
};

// What a resumed loop restored, for its log line and resume event.
struct ImportedLoop {
  size_t inflight = 0;  // samples back in the engine with their KV
  int64_t kv_tokens = 0;
  size_t finished = 0;     // finished samples awaiting training
  int64_t reattached = 0;  // environment episodes attached to again
  int64_t started_again = 0;
};

class AsyncLoop : private dispatch::RolloutPort {
 public:
  struct Options {
    rollout::EngineOptions engine;  // engine.initial_version: the policy version it starts at
    dispatch::DispatchOptions dispatch;
    bool offload_parked = false;  // move parked samples' KV to the host while training
    // Several ranks (borrowed; null: one): each runs this loop on its share
    // of the prompts (DispatchOptions::rank), and a step is taken only when
    // every rank has a batch ready — a rank whose batch is ready keeps
    // generating until the others have theirs.
    dist::Group* group = nullptr;
    // Makes the sample environment around the loop's engine (unset, or
    // returning null: none).
    std::function<absl::StatusOr<std::unique_ptr<SampleEnvironment>>(rollout::RolloutEngine&)>
        environment;
  };
  static absl::StatusOr<std::unique_ptr<AsyncLoop>> Create(const model::Transformer& model,
                                                           const Options& options);

  const rollout::RolloutEngine& engine() const { return *engine_; }
  const dispatch::Dispatcher& dispatcher() const { return *dispatcher_; }
  // Its difficulty filter's verdicts and history come from the stage.
  dispatch::Dispatcher& dispatcher() { return *dispatcher_; }
  const SampleTable& table() const { return table_; }
  const InflightObservations& inflight() const { return inflight_; }
  int64_t step() const { return step_; }  // optimizer steps taken in the stage
  int64_t policy_version() const { return policy_version_; }
  bool every_task_retired() const { return every_task_retired_; }

  // Takes optimizer steps until `steps` are done, each on a batch `trainer`
  // trains, or until the difficulty filter has retired every task there is
  // to draw (on some rank, which then never has a batch again): then it
  // returns early on every rank, every_task_retired() says so, and samples
  // that make no whole batch are left untrained.
  // INTERNAL when nothing is in flight, nothing can be dispatched and no
  // batch is ready for any other reason.
  absl::Status Run(PromptSource& source, BatchTrainer& trainer, int64_t steps,
                   const LoopHooks& hooks);
  // A live change of the dataset mix (validated by LiveConfig::Apply against
  // the dispatcher's rules).
  void SetDatasets(const std::vector<dispatch::DatasetQuota>& datasets);
  // The run stops preempted (after its checkpoint).
  void Preempted();

  // Checkpoints (between engine steps). Export parks the engine and writes
  // out the dispatcher and every sample, in-flight ones with their KV on the
  // host; ContinueAfterExport puts the exported samples back so the run goes
  // on as if nothing happened.
  absl::StatusOr<GrpoCursor> Export();
  absl::Status ContinueAfterExport(GrpoCursor cursor);
  // A resumed run: the state `cursor` holds (with `rank_change` when fewer
  // ranks wrote it), the loop at optimizer step `step`; `source` reopens
  // each sample and the environment attaches to its episodes again.
  absl::StatusOr<ImportedLoop> Import(GrpoCursor cursor, const RankChange* rank_change,
                                      int64_t step, PromptSource& source);

 private:
  AsyncLoop(std::unique_ptr<rollout::RolloutEngine> engine,
            std::unique_ptr<dispatch::Dispatcher> dispatcher, const Options& options)
      : engine_(std::move(engine)),
        dispatcher_(std::move(dispatcher)),
        offload_parked_(options.offload_parked),
        group_(options.group),
        policy_version_(options.engine.initial_version) {}

  // RolloutPort: the dispatcher admits through the loop.
  int64_t PolicyVersion() const override { return engine_->policy_version(); }
  void Admit(const dispatch::PromptGroup& group) override;

  // A batch of complete subgroups to train on now, or none (with several
  // ranks: unless every rank has one ready), infrastructure failures taken
  // out. Sets waiting_for_ranks_ when this rank's batch waits for others,
  // and every_task_retired_ when a rank (this one or another) has no batch
  // and is `retired_out`: idle, with nothing left to draw but retired
  // tasks, so that it never has one again.
  absl::StatusOr<std::optional<std::vector<TrainingSample>>> NextBatch(bool retired_out);
  // Trains on `samples`, reports, resumes the engine at the new version.
  absl::Status TrainStep(std::vector<TrainingSample> samples, BatchTrainer& trainer,
                         const LoopHooks& hooks);

  // Drops the prompt groups of samples that could not start, with a warning.
  void DropFailures();
  // Finished environment episodes into the table.
  absl::Status CollectEpisodes();
  // One engine step (when it has samples) and its finished samples.
  absl::Status StepEngine();
  // A finished sample back to the dispatcher: kept in the table or dropped.
  void Finished(uint64_t id, rollout::SampleState state);

  // Import's parts: the dispatcher's state (and those of the ranks this one
  // took over), the samples' entries and states, the environment's episodes.
  absl::Status ImportDispatcher(const nlohmann::json& state, const RankChange* rank_change);
  struct Episode {
    rollout::SampleRequest request;  // the sample's, as its source reopened it
    nlohmann::json record;           // its SampleEnvironment::Exported record
  };
  absl::Status ImportSamples(GrpoCursor& cursor, PromptSource& source, ImportedLoop& imported);
  absl::Status ContinueEpisodes(std::map<uint64_t, Episode> episodes, ImportedLoop& imported);

  std::unique_ptr<rollout::RolloutEngine> engine_;
  std::unique_ptr<dispatch::Dispatcher> dispatcher_;
  std::unique_ptr<SampleEnvironment> environment_;  // null: none
  PromptSource* source_ = nullptr;                  // during Run
  bool offload_parked_;
  dist::Group* group_;
  bool waiting_for_ranks_ = false;  // a batch is ready here, not yet on every rank
  bool every_task_retired_ = false;
  int64_t step_ = 0;
  int64_t policy_version_;
  SampleTable table_;
  RolloutTotals totals_;
  int64_t prefix_evictions_ = 0;  // the pool's count at the previous step
  InflightObservations inflight_;
  std::map<std::string, int64_t> masked_;       // since the previous step
  std::vector<TrainingSample> masked_samples_;  // the same
  int64_t finished_ = 0;                        // samples finished (or failed) so far
};

}  // namespace loom::train
