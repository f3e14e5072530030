#pragma once
// SampleEnvironment: samples whose generation alternates between the engine
// and something outside it — agent episodes, whose turns go to a sandbox
// worker and come back as tool results appended to the parked sample. The
// async loop starts such a sample here instead of in the engine, pumps the
// environment once per iteration, offers it every sample the engine stops or
// finishes, and hands it its share of checkpoints and resumes. The agent
// stage implements it (src/train/agent_stage.h); a loop without one runs
// plain prompts. Run loop thread only.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/rollout/sample_state.h"
#include "loom/train/sample_table.h"

namespace loom::train {

class SampleEnvironment {
 public:
  virtual ~SampleEnvironment() = default;

  // Starts `entry`'s episode; `request` (its prompt empty: the environment
  // supplies it) gives the sample's id, sampling and limits.
  virtual void Start(const SampleEntry& entry, rollout::SampleRequest request) = 0;

  // Applies what the environment did since the last call, waiting up to
  // `wait_s` for something, and returns the samples whose episodes ended
  // with their outcomes; `table` holds every sample the loop admitted.
  struct Ended {
    rollout::SampleState state;
    agent::EpisodeOutcome outcome;
    // An external harness's episode: its training sequences after `state`
    // (SampleEntry::sequences).
    std::vector<rollout::SampleState> sequences;
  };
  virtual absl::StatusOr<std::vector<Ended>> Pump(double wait_s, const SampleTable& table) = 0;
  // After an engine step: the samples it stopped at a turn's end.
  virtual void Stopped(const std::vector<uint64_t>& ids) = 0;
  // A sample the engine finished: true when it is the environment's, which
  // holds it until its episode ends.
  virtual bool Hold(rollout::SampleState& state) = 0;
  // Episodes running.
  virtual int64_t inflight() const = 0;

  // Checkpoints. BeginExport once, then Export for each of the
  // environment's samples the engine has not finished: its record (null: a
  // resumed run starts it again) and whether its tokens go into the
  // checkpoint — from `held` when the environment holds them, else from the
  // engine. Holds says, after the save, which of those stay where they are.
  struct Exported {
    nlohmann::json record;
    bool tokens = false;
    const rollout::SampleState* held = nullptr;
  };
  virtual void BeginExport() = 0;
  virtual Exported Export(uint64_t id) = 0;
  virtual bool Holds(uint64_t id) const = 0;
  // A resumed run: goes on with `entry`'s episode from its exported
  // `record` (its tokens, if it exported them, are back in the engine), or
  // starts it again. Returns whether it attached to the running episode
  // rather than starting it again; DATA_LOSS naming the sample when the
  // record is malformed or its tokens are missing.
  virtual absl::StatusOr<bool> Resume(const SampleEntry& entry, rollout::SampleRequest request,
                                      const nlohmann::json& record) = 0;
  // The run stops preempted: the episodes the last checkpoint exported stay
  // on their workers for the resumed run.
  virtual void Preempted() = 0;

  // Around the optimizer step that changes the weights in place: the
  // environment's own generation stops touching them, and goes on under
  // `policy_version` after.
  virtual void BeforeWeightUpdate() {}
  virtual absl::Status AfterWeightUpdate(int64_t /*policy_version*/) { return absl::OkStatus(); }

  // Adds the environment's figures for a trained batch to its metrics line.
  virtual void AddStepFigures(const std::map<std::string, int64_t>& masked_by_cause,
                              nlohmann::json& record) const = 0;
};

}  // namespace loom::train
