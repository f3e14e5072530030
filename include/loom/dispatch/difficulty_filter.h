#pragma once
// DifficultyFilter: online difficulty filtering of training tasks
// (`tasks.datasets[].filter`). Per dataset it keeps each task's running pass
// rate, tallied by the task's content key (loom/tasks/ledger.h TaskKey), and
// retires a task for the rest of the run once it has `after_attempts`
// attempts and its pass rate leaves [min_pass, max_pass]: a task every
// sample solves, or none does, gives GRPO subgroups without variance, whose
// rollout tokens teach nothing. The dispatcher skips retired tasks.
//
// The pass rate is over every attempt, or with a `window` over the run's
// most recent `window` attempts: then a task the policy learns during the
// run retires once it has solved the whole window (a moving curriculum). A
// task with fewer than min(window, after_attempts) attempts in this run is
// judged on its whole tally, its ledger history included.
//
// The tally of one dataset is its own: the same file listed twice (one entry
// per harness) filters each entry on its own attempts. A task can start from
// its history in the task ledger (Seed). Retired is final, even when the band
// widens later; a band that narrows retires what it now excludes at once.
//
// Plain state, exported whole into checkpoints. Not thread-safe.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace loom::dispatch {

// One dataset's band; after_attempts 0 turns its filter off.
struct FilterBand {
  static constexpr int kMaxWindow = 64;

  double min_pass = 0;
  double max_pass = 1;
  int after_attempts = 0;
  int window = 0;  // attempts the rate is over, the most recent first (0: all; at most 64)

  bool on() const { return after_attempts > 0; }
};

// The verdict of one trained sample on its task (infrastructure failures
// carry none: the policy did not earn them).
struct TaskVerdict {
  int dataset = 0;
  std::string key;   // TaskKey
  std::string name;  // how people know the task: its id, or the problem's file:line
  bool passed = false;
};

// A task that left its band.
struct Retirement {
  int dataset = 0;
  std::string key, name;
  int64_t attempts = 0, passes = 0;  // the whole tally
  double pass_rate = 0;              // the rate that retired it (over the window, with one)
  bool from_history = false;         // retired on the ledger's history, before this run tried it
};

class DifficultyFilter {
 public:
  explicit DifficultyFilter(size_t datasets) : tallies_(datasets), retired_(datasets, 0) {}

  // Adds history (the ledger's attempts at `key`) to a task's tally.
  void Seed(int dataset, const std::string& key, const std::string& name, int64_t attempts,
            int64_t passes);
  // Tallies `verdicts` and retires the tasks that leave their dataset's band.
  void Record(const std::vector<TaskVerdict>& verdicts, const std::vector<FilterBand>& bands);
  // Retires every task already outside its band (after Seed, or when a band
  // changes).
  void Reconsider(const std::vector<FilterBand>& bands);

  bool Retired(int dataset, const std::string& key) const;
  int64_t retired(int dataset) const { return retired_.at(static_cast<size_t>(dataset)); }

  // The retirements since the last call, in the order they happened.
  std::vector<Retirement> TakeRetirements();

  nlohmann::json Export() const;
  // DATA_LOSS for a malformed state or another number of datasets (nothing changed).
  absl::Status Import(const nlohmann::json& state);

 private:
  struct Tally {
    std::string name;
    int64_t attempts = 0, passes = 0;
    bool retired = false;
    bool seeded_only = true;  // every attempt so far came from the ledger's history
    uint64_t recent = 0;      // this run's latest verdicts, the newest in bit 0 (1: passed)
    int recent_count = 0;     // how many bits of `recent` hold one (at most 64)
  };
  // The pass rate `band` judges `tally` on.
  static double PassRate(const Tally& tally, const FilterBand& band);
  void Consider(int dataset, const std::string& key, Tally& tally, const FilterBand& band);

  std::vector<std::map<std::string, Tally>> tallies_;  // per dataset, by task key
  std::vector<int64_t> retired_;                       // per dataset
  std::vector<Retirement> pending_;
};

}  // namespace loom::dispatch
