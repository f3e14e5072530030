#include "loom/train/live_config.h"

#include <string>

namespace loom::train {

LiveConfig::LiveConfig(const config::TasksSection& tasks, int64_t version) : version_(version) {
  for (const auto& d : tasks.datasets) datasets_.push_back({d.name, d.weight, d.max_inflight});
}

absl::Status LiveConfig::Replace(std::vector<dispatch::DatasetQuota> datasets) {
  if (datasets.size() != datasets_.size()) {
    return absl::InvalidArgumentError("tasks.datasets: " + std::to_string(datasets.size()) +
                                      " datasets given, the run has " +
                                      std::to_string(datasets_.size()));
  }
  bool any = false;
  for (size_t i = 0; i < datasets.size(); ++i) {
    const dispatch::DatasetQuota& d = datasets[i];
    const std::string key = "tasks.datasets." + std::to_string(i);
    if (d.name != datasets_[i].name) {
      return absl::InvalidArgumentError(key + ".name: expected '" + datasets_[i].name + "', got '" +
                                        d.name + "' (datasets cannot be added, removed or moved)");
    }
    if (!(d.weight >= 0)) return absl::InvalidArgumentError(key + ".weight: must be >= 0");
    if (d.max_inflight < 0) return absl::InvalidArgumentError(key + ".max_inflight: must be >= 0");
    any = any || d.weight > 0;
  }
  if (!any) return absl::InvalidArgumentError("tasks.datasets: every weight is 0");
  datasets_ = std::move(datasets);
  ++version_;
  return absl::OkStatus();
}

}  // namespace loom::train
