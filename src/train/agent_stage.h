#pragma once
// AgentStage: what the GRPO stage needs for datasets with `environment:
// sandbox` — the sandbox clients (local workers or remote ones, and the
// pool), the episodes' client threads, their glue to the engine, and the
// run's trajectory log (<run dir>/trajectories.jsonl: every finished agent
// sample with its tokens, loss mask and the worker's trajectory).
// Destroying it ends the episodes still running, then stops local workers.
// Run loop thread only.

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "loom/agent/episodes.h"
#include "loom/agent/rollout.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/rollout/engine.h"
#include "loom/rpc/sandbox_clients.h"
#include "loom/train/context.h"
#include "loom/train/sample_table.h"

namespace loom::train {

// A trajectory in the protobuf JSON mapping (the .proto's field names, zeros
// printed), as trajectories.jsonl and checkpoints hold it; and back, with a
// DATA_LOSS status led by `what` when the JSON is not a trajectory.
nlohmann::json TrajectoryJson(const v1::Trajectory& trajectory);
absl::StatusOr<v1::Trajectory> TrajectoryFromJson(const nlohmann::json& json,
                                                  const std::string& what);

class AgentStage {
 public:
  // Null when no dataset has `environment: sandbox`. Errors: the sandbox
  // clients could not start (FAILED_PRECONDITION without workers), the
  // tokenizer lacks the chat format's tokens, the log cannot be opened.
  static absl::StatusOr<std::unique_ptr<AgentStage>> Create(const TrainContext& context,
                                                            rollout::RolloutEngine& engine);

  agent::AgentRollout* rollout() { return rollout_.get(); }

  // The episodes a checkpoint recorded for a resumed run to attach to; the
  // latest are kept on their workers if the stage ends preempted (Preempted),
  // and every other running episode's session is released on exit.
  void set_checkpointed(std::set<uint64_t> ids) { checkpointed_ = std::move(ids); }
  void Preempted() { episodes_->KeepOnExit(checkpointed_); }
  // For a checkpoint: snapshots of the leased episodes that go on
  // (sandbox.snapshot_mb), waited for up to sandbox.tool_timeout_s but at
  // most a third of ckpt.preempt_deadline_s, which the whole checkpoint of a
  // preemption must meet.
  void TakeSnapshots() {
    const config::SandboxSection& sandbox = context_.config.sandbox;
    if (sandbox.snapshot_mb <= 0) return;
    const double wait_s =
        std::min<double>(sandbox.tool_timeout_s, context_.config.ckpt.preempt_deadline_s / 3);
    rollout_->TakeSnapshots(int64_t{sandbox.snapshot_mb} << 20, wait_s);
  }

  // Appends a finished agent sample (its trajectory in `info`) to the log.
  absl::Status Log(const rollout::SampleState& state, const SampleEntry& info);

 private:
  AgentStage(const TrainContext& context, metrics::MetricsWriter log)
      : context_(context), log_(std::move(log)) {}

  const TrainContext& context_;
  rpc::SandboxClients clients_;
  std::unique_ptr<agent::AgentEpisodes> episodes_;
  std::unique_ptr<agent::AgentRollout> rollout_;
  metrics::MetricsWriter log_;
  std::set<uint64_t> checkpointed_;
};

}  // namespace loom::train
