#pragma once
// Live keys: the part of a run's config that may change while the run goes
// on (`loom ctl RUN_DIR set`), and the checks a change passes.
//
// A change is a list of --set assignments (tree.h: list entries by index or
// name, `+list=VALUE`, `~key`) applied to the resolved config of the current
// version, then bound and validated as a whole config is — so a live change
// gets exactly the errors a config file would. On top, every value that
// differs must be live. Values are compared flat: one key per scalar, list
// entries of maps by their `name` (tasks.datasets.sort.weight) plus the list
// of names itself (tasks.datasets: [arith, sort]).
//
// The live keys, and why each is safe mid-run:
//   tasks.datasets.*.weight, .active, .max_inflight — read by the dispatcher
//     at the next refill; samples in flight keep their cap accounting.
//   tasks.datasets.*.teacher — read when a prompt is dispatched; a sample
//     keeps the teacher it was dispatched with.
//   opd.teachers (add, replace, remove) — the pool keeps a replaced or
//     removed teacher for the samples still holding it.
//   tasks.datasets.*.filter.min_pass, .max_pass, .after_attempts, .window — read by
//     the dispatcher's difficulty filter at its next verdicts; a narrower
//     band retires what it now excludes at once, and retired tasks stay so.
//   tasks.eval_every — read after each step.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/config/run_config.h"

namespace loom::config {

// One value that differs between two versions.
struct LiveChange {
  std::string key;   // flat: tasks.datasets.sort.weight, opd.teachers.t2.path
  std::string from;  // as YAML flow text; "" when the key is new
  std::string to;    // "" when the key is gone
};

// The patterns of live keys ("*": a list entry's name), for docs and errors.
const std::vector<std::string>& LiveKeyPatterns();
bool IsLiveKey(const std::string& flat_key);

// `current` with `assignments` applied. INVALID_ARGUMENT, one "key: what was
// expected" line per problem, when an assignment is malformed, the result
// is not a valid config, a value that differs is not live, or nothing
// differs. `changes` receives what differs, in key order.
absl::StatusOr<RunConfig> ApplyLiveChange(const RunConfig& current,
                                          const std::vector<std::string>& assignments,
                                          std::vector<LiveChange>& changes);

// The live values of `config` as assignments that, applied to a config with
// the same datasets, give it these values (a checkpoint keeps them, so a
// resumed run goes on under its live version, not the file's values).
std::vector<std::string> LiveAssignments(const RunConfig& config);

// `config` with `assignments` applied (LiveAssignments of a checkpoint).
// INVALID_ARGUMENT as ApplyLiveChange, but any key may differ.
absl::StatusOr<RunConfig> ReapplyLive(const RunConfig& config,
                                      const std::vector<std::string>& assignments);

}  // namespace loom::config
