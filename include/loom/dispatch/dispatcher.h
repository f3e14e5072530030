#pragma once
// Dispatcher: decides which prompts enter the rollout engine and when, and
// which finished subgroups a training step consumes.
//
// Owns the prompt bookkeeping of the async loop: the per-dataset training
// cursors, the in-flight samples (it admits every one; the run loop reports
// every finish), the ready (prompt, effort) subgroups, and the staleness
// accounting. It never talks to the engine except through RolloutPort.
//
//  * Refill admits prompts while the policy's budget covers a whole group,
//    in-flight stays <= max_inflight, the dataset picked (by weight, among
//    those whose cap has room) stays within its cap, and the staleness
//    bound is safe: new prompts wait while in-flight + ready samples reach
//    (max_staleness + 1) * batch_samples, more than can be trained on before
//    they would grow too old.
//  * Each prompt goes out as one subgroup per effort level of M_b samples.
//  * A dataset with a difficulty filter (DatasetQuota::filter) skips the
//    tasks its DifficultyFilter retired: the cursor moves past them. A
//    dataset whose draws come up retired a whole epoch in a row (2 x its
//    problems; 10,000 for a generator) is exhausted: never picked again.
//  * TakeBatch returns complete subgroups, oldest first, totalling at least
//    batch_samples, only when training at version V keeps the bound: every
//    sample left behind (in flight or ready) must still have lag <=
//    max_staleness at version V + 1; otherwise the step waits for it.
//    (Lag = policy version - version of the sample's oldest token, taken as
//    its dispatch version, which can only overstate it.)
//
// Not thread-safe: the run loop is its only caller.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/config/async_section.h"
#include "loom/config/grpo_section.h"
#include "loom/config/tasks_section.h"
#include "loom/dispatch/policy.h"
#include "loom/dispatch/rollout_port.h"
#include "loom/dispatch/types.h"

namespace loom::dispatch {

struct DispatchOptions {
  std::string policy = "sample";
  int max_inflight = 64;
  int batch_samples = 32;
  int max_staleness = 2;
  int warmup_drop_samples = 0;         // finishes whose prompts are dropped at the start
  std::vector<EffortSpec> efforts;     // the levels, each with M_b
  std::vector<DatasetQuota> datasets;  // the mix
  uint64_t seed = 0;                   // dataset choice
  // Several trainer ranks: this one takes every `ranks`-th prompt group of
  // the one-rank stream (group g goes to rank g mod ranks) with the dataset,
  // problem and ids — so the sampling seeds — one rank would give it: each
  // rank draws every group's dataset and keeps its own (exact while no
  // dataset's max_inflight cap is reached). batch_samples and max_inflight
  // are this rank's share.
  int rank = 0, ranks = 1;
  // The content key (TaskKey) of a dataset's training problem at a cursor
  // index; required when a dataset's difficulty filter is on.
  std::function<std::string(int dataset, uint64_t problem_index)> problem_key;

  // From the run config (`async`, `effort`, `tasks.datasets`).
  static DispatchOptions FromConfig(const config::AsyncSection& async,
                                    const config::EffortSection& effort,
                                    const config::TasksSection& tasks, uint64_t seed);
};

// The mix of `tasks.datasets`, in config order; an inactive dataset has weight 0.
std::vector<DatasetQuota> QuotasFromConfig(const config::TasksSection& tasks);

// INVALID_ARGUMENT naming the dataset unless some dataset has weight > 0 and
// every cap admits at least one prompt's group of `group_size` samples.
absl::Status CheckDatasets(const std::vector<DatasetQuota>& datasets, int group_size);

class Dispatcher {
 public:
  // INVALID_ARGUMENT when the options cannot work (a group larger than
  // max_inflight or than a dataset's cap, no dataset with weight > 0, ...).
  static absl::StatusOr<std::unique_ptr<Dispatcher>> Create(DispatchOptions options);

  // Replaces the mix (weights, caps) for every prompt dispatched from now on:
  // in-flight samples keep counting against their dataset's cap, so a
  // lowered cap holds back new prompts of that dataset until its in-flight
  // samples drain below it. INVALID_ARGUMENT (nothing changed) unless the
  // datasets are the same, in the same order, and pass CheckDatasets.
  absl::Status SetDatasets(std::vector<DatasetQuota> datasets);

  // Online difficulty filtering: the verdicts of trained samples on their
  // tasks (every rank records every rank's, in rank order, so that the
  // ranks keep drawing one stream). Tasks that leave their band retire.
  void RecordVerdicts(const std::vector<TaskVerdict>& verdicts);
  // History from the task ledger, before the run's first step; then
  // RetireOutsideBands() retires what it puts outside its band.
  void SeedFilter(int dataset, const std::string& key, const std::string& name, int64_t attempts,
                  int64_t passes);
  void RetireOutsideBands();
  // Retirements since the last call (to record), and the count per dataset.
  std::vector<Retirement> TakeRetirements() { return filter_.TakeRetirements(); }
  int64_t retired(int dataset) const { return filter_.retired(dataset); }
  // The datasets whose every task is retired, by name.
  std::vector<std::string> ExhaustedDatasets() const;

  // Admits every prompt allowed now (see above); returns how many.
  int Refill(RolloutPort& engine);

  // Records that a sample finished (completed, cut off or failed). LOOM_CHECKs
  // that the id is in flight.
  Disposition OnSampleFinished(uint64_t sample_id);

  // Records that a sample could not start (its prompt does not fit the
  // context or the KV pool): its whole prompt group is dropped, so no
  // subgroup of it becomes ready and its other samples come back kDrop. The
  // sample counts as finished and in DispatchStats::samples_failed. Returns
  // kDrop. LOOM_CHECKs that the id is in flight.
  Disposition OnSampleFailed(uint64_t sample_id);

  // The subgroups of the next training step at `policy_version`, or nothing
  // when the step must wait. Taken subgroups leave the ready set.
  std::optional<std::vector<ReadySubgroup>> TakeBatch(int64_t policy_version);
  // Whether TakeBatch(policy_version) would return a batch now (changes nothing).
  bool BatchReady(int64_t policy_version) const;

  int64_t inflight() const { return inflight_; }
  int64_t inflight(int dataset) const { return dataset_inflight_[dataset]; }
  int64_t ready_samples() const { return ready_samples_; }
  int group_size() const { return group_size_; }
  const DispatchOptions& options() const { return options_; }

  // Concurrency statistics since the last call.
  DispatchStats TakeStats();

  // Everything needed to continue exactly where this dispatcher is (cursors,
  // in-flight and ready bookkeeping, budget, random state), for checkpoints.
  nlohmann::json ExportState() const;

  // Restores ExportState() output into a dispatcher created with the same
  // options. DATA_LOSS for a malformed or mismatched state (nothing changed).
  absl::Status ImportState(const nlohmann::json& state);

  // Resuming on fewer ranks: takes over the ExportState() of a rank that is
  // gone, after ImportState() of this rank's own. Its prompts, in-flight
  // samples and ready subgroups join this rank's, to finish and be trained
  // here; no id it gave out is given again. DATA_LOSS for a malformed state
  // or a prompt both hold (nothing changed).
  absl::Status AdoptState(const nlohmann::json& state);

  // Resuming on another number of ranks: continues the prompt stream where
  // the rank whose ExportState() is `state` left it (its cursors, dataset
  // draws and ids), with this dispatcher's own rank and stride. Every rank
  // given the same state draws disjoint shares of one stream again.
  absl::Status ContinueStreamOf(const nlohmann::json& state);

 private:
  struct InflightSample {
    uint64_t prompt_id;
    uint64_t subgroup_id;
    int dataset;
    int64_t version;
  };
  struct PromptState {
    PromptGroup group;
    int unfinished = 0;
    bool dropped = false;
    bool any_finished = false;
    std::map<uint64_t, int> subgroup_unfinished;  // subgroup id -> samples left
  };

  struct ParsedState;

  Dispatcher(DispatchOptions options, std::unique_ptr<DispatchPolicy> policy);
  // ExportState() output, checked against these options.
  absl::StatusOr<ParsedState> ParseState(const nlohmann::json& state) const;
  // The difficulty filter's part of a parsed state.
  void ImportFilter(const ParsedState& parsed);

  PolicyView View() const;
  bool StalenessAllowsDispatch() const;
  std::optional<int> PickDataset();
  // The dataset's next problem not retired, advancing its cursor; none when
  // the dataset turns out exhausted (and is marked so).
  std::optional<uint64_t> NextProblem(int dataset);
  std::vector<FilterBand> Bands() const;
  // The dataset and problem index of this rank's next group: the next round
  // of `ranks` groups of the one-rank stream is drawn (a dataset pick each,
  // advancing that dataset's cursor) and this rank keeps group `rank` of it.
  // None when every dataset is at its cap.
  std::optional<std::pair<int, uint64_t>> PickInRound();
  PromptGroup NewGroup(int dataset, uint64_t problem_index, int64_t version);
  void Admit(const PromptGroup& group, RolloutPort& engine);
  void MarkSubgroupReady(PromptState& prompt, uint64_t subgroup_id);
  bool LeftoversStayFresh(int64_t next_version, const std::vector<ReadySubgroup>& leftovers) const;
  // The batch TakeBatch would take, the subgroups it would leave and the
  // samples it takes; none when no batch is ready.
  struct BatchPlan {
    std::vector<ReadySubgroup> batch, leftovers;
    int64_t taken = 0;
  };
  std::optional<BatchPlan> PlanBatch(int64_t policy_version) const;
  void RecordRefill();

  DispatchOptions options_;
  std::unique_ptr<DispatchPolicy> policy_;
  int group_size_ = 0;
  int64_t budget_ = 0;
  int64_t inflight_ = 0;
  int64_t ready_samples_ = 0;
  int64_t finished_total_ = 0;
  uint64_t next_id_ = 1;  // sample, subgroup and prompt ids share one counter
  uint64_t rng_state_;
  std::vector<int64_t> dataset_inflight_;
  std::vector<uint64_t> cursors_;  // next problem index per dataset
  DifficultyFilter filter_;
  std::vector<bool> exhausted_;  // per dataset: every task retired
  std::map<uint64_t, InflightSample> samples_;
  std::map<uint64_t, PromptState> prompts_;
  std::vector<ReadySubgroup> ready_;  // in the order they completed
  DispatchStats stats_;
  double inflight_sum_ = 0;
};

}  // namespace loom::dispatch
