#pragma once
// AgentStage: the sample environment of datasets with `environment:
// sandbox` (sample_environment.h) — the sandbox clients (local workers or remote ones, and the
// pool), the episodes' client threads, their glue to the engine, and the
// run's trajectory log (<run dir>/trajectories.jsonl: every finished agent
// sample with its tokens, loss mask and the worker's trajectory).
//
// A dataset with an external `harness` runs its episodes there instead
// (agent/harness_episodes.h): on a pool of their own, their model calls
// generated on an engine of their own over the policy's weights, paused
// around every weight update. Such an episode comes back as its session's
// sequences; one the checkpoint finds running starts again on resume.
// Destroying it ends the episodes still running, then stops local workers.
// Run loop thread only.

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "loom/agent/episodes.h"
#include "loom/agent/harness_episodes.h"
#include "loom/agent/rollout.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/rollout/engine.h"
#include "loom/rpc/sandbox_clients.h"
#include "loom/train/sample_environment.h"
#include "loom/train/sample_table.h"
#include "train/context.h"

namespace loom::train {

class AgentStage : public SampleEnvironment {
 public:
  // Null when no dataset has `environment: sandbox`. Errors: the sandbox
  // clients could not start (FAILED_PRECONDITION without workers), the
  // tokenizer lacks the chat format's tokens, the log cannot be opened.
  static absl::StatusOr<std::unique_ptr<AgentStage>> Create(const TrainContext& context,
                                                            rollout::RolloutEngine& engine);

  void Start(const SampleEntry& entry, rollout::SampleRequest request) override;
  // Ended episodes are appended to the trajectory log.
  absl::StatusOr<std::vector<Ended>> Pump(double wait_s, const SampleTable& table) override;
  void Stopped(const std::vector<uint64_t>& ids) override { rollout_->OnStopped(ids); }
  bool Hold(rollout::SampleState& state) override { return rollout_->Hold(state); }
  int64_t inflight() const override {
    return rollout_->inflight() + (harnesses_ != nullptr ? harnesses_->inflight() : 0);
  }
  void BeforeWeightUpdate() override;
  absl::Status AfterWeightUpdate(int64_t policy_version) override;

  // A leased episode that has turns is exported with its record and
  // tokens, for a resumed run to attach to; its snapshot is taken first
  // (sandbox.snapshot_mb), waited for up to sandbox.tool_timeout_s but at
  // most a third of ckpt.preempt_deadline_s, which the whole checkpoint of a
  // preemption must meet. Others start again.
  void BeginExport() override;
  Exported Export(uint64_t id) override;
  bool Holds(uint64_t id) const override { return rollout_->Held(id) != nullptr; }
  absl::StatusOr<bool> Resume(const SampleEntry& entry, rollout::SampleRequest request,
                              const nlohmann::json& record) override;
  // The episodes the latest checkpoint exported stay on their workers; every
  // other running episode's session is released on exit.
  void Preempted() override { episodes_->KeepOnExit(exported_); }

  // episodes_masked (with episodes_masked_by_cause), and since the run
  // (re)started, resumed episodes that could not be attached again
  // (episodes_not_reattached) and of them those that went on from their
  // snapshots (episodes_restored).
  void AddStepFigures(const std::map<std::string, int64_t>& masked_by_cause,
                      nlohmann::json& record) const override;

 private:
  AgentStage(const TrainContext& context, const rollout::RolloutEngine& engine,
             metrics::MetricsWriter log)
      : context_(context), engine_(engine), log_(std::move(log)) {}

  // The worker's task for `entry` and the effort its prompt shows.
  v1::Task Task(const SampleEntry& entry) const;
  // The external harnesses' episodes, when some dataset has one.
  absl::Status StartHarnesses(rollout::RolloutEngine& engine);
  // The harness episodes that ended, as the loop's samples; logged.
  absl::Status TakeHarnessEpisodes(double wait_s, const SampleTable& table,
                                   std::vector<Ended>& ended);

  const TrainContext& context_;
  const rollout::RolloutEngine& engine_;
  rpc::SandboxClients clients_;
  std::unique_ptr<agent::AgentEpisodes> episodes_;
  std::unique_ptr<agent::AgentRollout> rollout_;
  std::unique_ptr<agent::HarnessEpisodes> harnesses_;
  struct ExternalHarness {
    agent::HarnessSpec spec;
    std::string version;  // its npm package's ("" unknown)
  };
  std::map<int, ExternalHarness> harness_of_;  // by dataset index: the external ones
  metrics::MetricsWriter log_;
  std::set<uint64_t> exported_;  // by the latest checkpoint, to attach to again
};

}  // namespace loom::train
