#pragma once
// SampleTable: the async loop's one record per sample it admitted and has not
// trained on yet — the dispatcher's ticket, where its problem came from, the
// run config version it was dispatched under, and, once it finished, the
// engine's state and an agent episode's outcome. The same entry is what a
// checkpoint holds of the sample (SampleEntryJson). Samples leave the table
// when a training step takes their subgroup, when their prompt group is
// dropped, or when they could not start.
//
// Ordered by sample id, which is also admission order: checkpoints write the
// table in that order and a resumed run re-imports it the same way.
// Run loop thread only.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/agent/outcome.h"
#include "loom/dispatch/types.h"
#include "loom/rollout/sample_state.h"
#include "loom/tasks/problem.h"

namespace loom::train {

struct SampleEntry {
  uint64_t id = 0;
  uint64_t subgroup_id = 0;
  int effort = 0;
  int dataset = 0;             // index into the run's datasets
  uint64_t problem_index = 0;  // Dataset::Train(problem_index) is `problem` (for checkpoints)
  std::shared_ptr<const tasks::Problem> problem;
  bool agent = false;          // a multi-turn sandbox episode (environment: sandbox)
  int teacher = -1;            // on-policy distillation: the teacher slot; -1 = none
  int64_t config_version = 0;  // the run config version it was dispatched under
  // Set once the sample finished: its tokens, log-probs and versions.
  std::optional<rollout::SampleState> state;
  // Agent samples, once the episode ended: its outcome. The reward is its
  // verdict; an episode that failed for infrastructure reasons is not trained on.
  std::optional<agent::EpisodeOutcome> outcome;
  // An external harness's episode generates on several sequences (the
  // endpoint's segments: each conversation the harness sent, each generated
  // token in exactly one). The first is `state`, the others are here, in
  // the order begun, each with this sample's id; all train with the
  // episode's one advantage, and the episode counts once.
  std::vector<rollout::SampleState> sequences;
};

// An entry as a checkpoint's state.json holds it: everything but `problem`
// (Dataset::Train(problem_index) rebuilds it) and `state` (samples.json).
// Reading accepts the `trajectory` that checkpoints written before outcomes
// held; a malformed entry is DATA_LOSS naming `source` and the field.
nlohmann::json SampleEntryJson(const SampleEntry& entry);
absl::StatusOr<SampleEntry> SampleEntryFromJson(const nlohmann::json& json,
                                                const std::string& source);

// A finished sample handed to a trainer.
struct TrainingSample {
  rollout::SampleState state;
  SampleEntry info;  // `info.state` is empty: the state moved to `state`
};

class SampleTable {
 public:
  // Adds an admitted sample (its id must be new).
  void Admit(SampleEntry entry);
  // The sample's record, or null.
  SampleEntry* Find(uint64_t id);
  const SampleEntry* Find(uint64_t id) const;
  // Records that sample `id` finished with `state`.
  void Finish(uint64_t id, rollout::SampleState state);
  // Removes a sample (dropped or failed).
  void Erase(uint64_t id);

  // Records that sample `id` could not start; TakeFailures returns it once.
  void Fail(uint64_t id, absl::Status status);
  std::vector<std::pair<uint64_t, absl::Status>> TakeFailures();

  // Removes the finished samples of `subgroups` and returns them in order.
  // LOOM_CHECKs that each one is in the table and finished.
  std::vector<TrainingSample> Take(const std::vector<dispatch::ReadySubgroup>& subgroups);

  const std::map<uint64_t, SampleEntry>& entries() const { return entries_; }
  size_t finished() const;

 private:
  std::map<uint64_t, SampleEntry> entries_;
  std::vector<std::pair<uint64_t, absl::Status>> failures_;
};

}  // namespace loom::train
