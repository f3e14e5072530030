#pragma once
// The values the dispatcher hands out and takes back: prompt groups split
// into (prompt, effort) subgroups of samples, and the complete subgroups a
// training step consumes. Plain value types.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/dispatch/difficulty_filter.h"

namespace loom::dispatch {

// One effort level of the prompt's group: effort b and M_b samples.
struct EffortSpec {
  int effort = 100;
  int samples = 1;
};

// A dataset of the mix as the dispatcher sees it.
struct DatasetQuota {
  DatasetQuota() = default;
  DatasetQuota(std::string name, double weight, int max_inflight = 0, FilterBand filter = {},
               uint64_t problems = 0)
      : name(std::move(name)),
        weight(weight),
        max_inflight(max_inflight),
        filter(filter),
        problems(problems) {}

  std::string name;
  double weight = 1.0;    // relative sampling weight (> 0 to be picked)
  int max_inflight = 0;   // concurrency cap in samples; 0 = none
  FilterBand filter;      // online difficulty filtering (off unless after_attempts > 0)
  uint64_t problems = 0;  // distinct training problems; 0 = unbounded (a generator)
};

// The engine seeds a sample's sampler from the run seed and sample_id.
struct SampleTicket {
  uint64_t sample_id = 0;  // unique within the run
  uint64_t subgroup_id = 0;
  int effort = 100;
};

struct Subgroup {
  uint64_t id = 0;  // unique within the run
  int effort = 100;
  std::vector<SampleTicket> samples;  // M_b of them
};

// A prompt admitted into the engine: every sample of every effort at once.
struct PromptGroup {
  uint64_t prompt_id = 0;
  int dataset = 0;                  // index into DispatchOptions::datasets
  uint64_t problem_index = 0;       // the dataset's training cursor: Dataset::Train(problem_index)
  int64_t version = 0;              // policy version when dispatched
  std::vector<Subgroup> subgroups;  // one per effort level, in level order

  int size() const;  // samples in the group
};

// A (prompt, effort) subgroup whose samples have all finished.
struct ReadySubgroup {
  uint64_t subgroup_id = 0;
  uint64_t prompt_id = 0;
  int dataset = 0;
  uint64_t problem_index = 0;
  int effort = 100;
  std::vector<uint64_t> sample_ids;
  int64_t oldest_version = 0;  // version of its oldest token (at most: the dispatch version)
};

// What happens to a finished sample's data.
enum class Disposition {
  kKeep,  // keep it: it belongs to a subgroup that will be trained on
  kDrop,  // discard it (its prompt was dropped during warm-up)
};

// Concurrency seen at each Refill since the last TakeStats.
struct DispatchStats {
  int64_t refills = 0;
  double inflight_mean = 0;
  int64_t inflight_min = 0;
  int64_t inflight_max = 0;
  int64_t prompts_dispatched = 0;
  int64_t samples_finished = 0;
  int64_t samples_dropped = 0;
  int64_t samples_failed = 0;    // could not start: their prompt groups were dropped
  int64_t problems_skipped = 0;  // drawn but retired by their dataset's difficulty filter
};

}  // namespace loom::dispatch
