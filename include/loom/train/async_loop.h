#pragma once
// AsyncLoop: the one asynchronous run loop. It owns the rollout engine, the
// dispatcher and the sample table, and cycles
//
//   refill → engine step → finished → ready? → park → train → resume
//
// until the stage has taken its steps: the dispatcher admits prompt groups
// through a RolloutPort, the engine generates one token step at a time,
// finished samples go back to the dispatcher (and into the table), and when a
// batch of complete subgroups is ready the engine is parked at a token
// boundary, a BatchTrainer takes one optimizer step on it, and the parked
// samples resume on their KV cache under the new policy version.
//
// What differs between stages plugs in: how prompts enter the engine (the
// port, which records every admitted sample in the table, or reports that it
// could not start), how a batch is trained (the trainer: GRPO, and the
// dispatch bench's), agent episodes, and hooks for checkpoints and per-step
// reporting. Run loop thread only.

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
#include "loom/train/sample_table.h"

namespace loom::train {

class AgentStage;

// Rollout work since the previous step, for throughput metrics.
struct RolloutTotals {
  int64_t decode_tokens = 0;
  int64_t prefill_tokens = 0;
  double seconds = 0;
};

// What a trainer gets: complete subgroups, in the order they became ready.
struct Batch {
  std::vector<TrainingSample> samples;
  int64_t step = 0;                  // 0-based optimizer step within the stage
  dispatch::DispatchStats dispatch;  // concurrency since the previous step
  RolloutTotals rollout;             // rollout work since the previous step
  // Agent samples whose episodes failed for infrastructure reasons, taken
  // out of `samples` since the previous step, by cause.
  std::map<std::string, int64_t> masked_by_cause;
};

// Takes agent samples whose episodes failed for reasons outside the policy
// (the worker was lost, no worker took the episode, the trainer stopped
// answering: Trajectory.penalty) out of `samples`, counting them in `by_cause`
// under their failure reason's leading word ("worker_lost"). They carry no
// reward the policy earned, so they are kept out of the loss and out of their
// subgroup's baseline. Failures the agent causes (time or step limits,
// format errors, killed commands) stay: their verdicts are the policy's.
void MaskInfrastructureFailures(std::vector<TrainingSample>& samples,
                                std::map<std::string, int64_t>& by_cause);

class BatchTrainer {
 public:
  virtual ~BatchTrainer() = default;
  // One optimizer step on `batch`; increments the policy version it was
  // built with. Returns the step's metrics line.
  virtual absl::StatusOr<nlohmann::json> Train(const Batch& batch) = 0;
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

class AsyncLoop {
 public:
  struct Options {
    rollout::EngineOptions engine;
    dispatch::DispatchOptions dispatch;
    bool offload_parked = false;  // move parked samples' KV to the host while training
    // Several ranks (borrowed; null: one): each runs this loop on its share
    // of the prompts (DispatchOptions::rank), and a step is taken only when
    // every rank has a batch ready — a rank whose batch is ready keeps
    // generating until the others have theirs.
    dist::Group* group = nullptr;
  };
  static absl::StatusOr<std::unique_ptr<AsyncLoop>> Create(const model::Transformer& model,
                                                           const Options& options);

  rollout::RolloutEngine& engine() { return *engine_; }
  dispatch::Dispatcher& dispatcher() { return *dispatcher_; }
  const dispatch::Dispatcher& dispatcher() const { return *dispatcher_; }
  SampleTable& table() { return table_; }
  RolloutTotals& totals() { return totals_; }
  const InflightObservations& inflight() const { return inflight_; }

  // Agent episodes of sandbox datasets (borrowed; null: none).
  void set_agents(AgentStage* agents) { agents_ = agents; }
  AgentStage* agents() const { return agents_; }

  // Runs optimizer steps `step`.. `steps` - 1 (`step` counts them), each
  // bumping `policy_version` through `trainer`. INTERNAL when nothing is in
  // flight, nothing can be dispatched and no batch is ready.
  absl::Status Run(dispatch::RolloutPort& port, BatchTrainer& trainer, int64_t& step, int64_t steps,
                   const int64_t& policy_version, const LoopHooks& hooks);

 private:
  AsyncLoop(std::unique_ptr<rollout::RolloutEngine> engine,
            std::unique_ptr<dispatch::Dispatcher> dispatcher, bool offload_parked,
            dist::Group* group)
      : engine_(std::move(engine)),
        dispatcher_(std::move(dispatcher)),
        offload_parked_(offload_parked),
        group_(group) {}

  // A batch of complete subgroups to train on now, or none (with several
  // ranks: unless every rank has one ready), infrastructure failures taken
  // out. Sets waiting_for_ranks_ when this rank's batch waits for others.
  absl::StatusOr<std::optional<std::vector<TrainingSample>>> NextBatch(int64_t policy_version);

  // Drops the prompt groups of samples that could not start, with a warning.
  void DropFailures();
  // Finished agent episodes into the table; their trajectories are logged.
  absl::Status CollectEpisodes();
  // One engine step (when it has samples) and its finished samples.
  absl::Status StepEngine();
  // A finished sample back to the dispatcher: kept in the table or dropped.
  void Finished(uint64_t id, rollout::SampleState state);

  std::unique_ptr<rollout::RolloutEngine> engine_;
  std::unique_ptr<dispatch::Dispatcher> dispatcher_;
  bool offload_parked_;
  dist::Group* group_;
  bool waiting_for_ranks_ = false;  // a batch is ready here, not yet on every rank
  SampleTable table_;
  RolloutTotals totals_;
  InflightObservations inflight_;
  std::map<std::string, int64_t> masked_;  // since the previous step
  int64_t finished_ = 0;                   // samples finished (or failed) so far
  AgentStage* agents_ = nullptr;
};

}  // namespace loom::train
