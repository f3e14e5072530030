#pragma once
// LiveConfig: the sections of the run config that may change while a run
// goes on — today the dataset mix (weights, concurrency caps; a weight of 0
// parks a dataset), teachers once on-policy distillation exists — behind a
// version number. Readers take these sections from here, not from the
// RunConfig; every sample keeps the version it was dispatched under
// (SampleEntry::config_version) and checkpoints record the version
// (RunCursor::config_version), so a resumed run goes on under the same one.
// Changing it is live reconfiguration's job (#16): Replace is the one way in.
// Run loop thread only.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "loom/config/tasks_section.h"
#include "loom/dispatch/types.h"

namespace loom::train {

class LiveConfig {
 public:
  // Version `version` (0 for a new run, the checkpoint's on resume) of
  // `tasks`' mix.
  LiveConfig(const config::TasksSection& tasks, int64_t version);

  int64_t version() const { return version_; }
  // One quota per dataset, in config order.
  const std::vector<dispatch::DatasetQuota>& datasets() const { return datasets_; }

  // Replaces the mix and bumps the version. INVALID_ARGUMENT (nothing
  // changed) unless the datasets are the same, in the same order, with
  // weights >= 0, caps >= 0 and at least one weight > 0.
  absl::Status Replace(std::vector<dispatch::DatasetQuota> datasets);

 private:
  std::vector<dispatch::DatasetQuota> datasets_;
  int64_t version_;
};

}  // namespace loom::train
