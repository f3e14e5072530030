#pragma once
// LiveConfig: the run config as it stands now, behind a version number. The
// live keys (config/live.h: the dataset mix and caps, which datasets are
// active, each dataset's teacher, the teacher list, tasks.eval_every) may
// change while the run goes on; readers of those keys take them from here,
// never from the RunConfig the run started with.
//
// Every sample keeps the version it was dispatched under
// (SampleEntry::config_version) and the teacher slot it was dispatched with,
// so a change applies to new dispatches only: samples in flight finish under
// their own version. Teacher slots are never reused — a replaced or removed
// teacher keeps its slot in the pool for the samples that still hold it.
//
// Checkpoints record State() with the version (RunCursor); Restore puts a
// resumed run back under that version, over the config file's values.
// Run loop thread only.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/algo/teacher_pool.h"
#include "loom/config/live.h"
#include "loom/config/run_config.h"
#include "loom/dispatch/types.h"

namespace loom::train {

class LiveConfig {
 public:
  // Version 0 of a new run: `config` as loaded; teacher slots in
  // opd.teachers order.
  explicit LiveConfig(const config::RunConfig& config);

  // Version `version` as a checkpoint recorded it (`state`: State()),
  // applied over `file` (the config the resumed run was started with).
  // DATA_LOSS naming the field when `state` is malformed; INVALID_ARGUMENT
  // when its values no longer fit `file` (a dataset renamed, ...).
  static absl::StatusOr<std::unique_ptr<LiveConfig>> Restore(const config::RunConfig& file,
                                                             int64_t version,
                                                             const nlohmann::json& state);

  int64_t version() const { return version_; }
  // This version's values (only live keys differ from the run's start).
  const config::RunConfig& config() const { return config_; }
  // One quota per dataset, in config order (an inactive one has weight 0).
  std::vector<dispatch::DatasetQuota> datasets() const;
  // The teacher slot a sample of `dataset` dispatched now gets; -1 for none.
  int TeacherSlot(int dataset) const;
  // Every teacher slot of the run, in slot order (the pool opens these).
  const std::vector<algo::TeacherSpec>& teacher_slots() const { return slots_; }

  // The pool holding the teacher slots (null: the run has no opd stage);
  // teachers a change adds are checked and added there.
  void set_teachers(algo::TeacherPool* pool) { pool_ = pool; }

  // Applies a change (--set assignments) as version + 1 and returns what
  // differs. INVALID_ARGUMENT, one "key: what was expected" line per
  // problem, and nothing changed, when ApplyLiveChange refuses it, a cap is
  // below one prompt's group, no active dataset has weight > 0, or a new
  // teacher fails the pool's checks (missing, another tokenizer, too big).
  absl::StatusOr<std::vector<config::LiveChange>> Apply(
      const std::vector<std::string>& assignments);

  // What a checkpoint keeps: the live values as assignments and the slots.
  nlohmann::json State() const;

 private:
  LiveConfig(config::RunConfig config, int64_t version, std::vector<algo::TeacherSpec> slots);
  // Points every teacher name of config_ at its slot: the newest one with
  // the same name and path.
  void MapTeachers();
  int FindSlot(const config::TeacherSection& teacher) const;
  absl::Status CheckDatasets(const config::RunConfig& next) const;

  config::RunConfig config_;
  int64_t version_;
  std::vector<algo::TeacherSpec> slots_;
  std::map<std::string, int> slot_of_;  // teacher name -> its slot now
  algo::TeacherPool* pool_ = nullptr;
};

}  // namespace loom::train
