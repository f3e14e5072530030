#include "loom/train/live_config.h"

#include <utility>

#include "loom/config/check.h"
#include "loom/dispatch/dispatcher.h"

namespace loom::train {
namespace {

std::vector<algo::TeacherSpec> ConfigTeachers(const config::RunConfig& config) {
  std::vector<algo::TeacherSpec> specs;
  for (const config::TeacherSection& t : config.opd.teachers) specs.push_back({t.name, t.path});
  return specs;
}

int GroupSize(const config::RunConfig& config) {
  int size = 0;
  for (size_t i = 0; i < config.effort.levels.size(); ++i) size += config.effort.SamplesAt(i);
  return size;
}

}  // namespace

LiveConfig::LiveConfig(const config::RunConfig& config)
    : LiveConfig(config, 0, ConfigTeachers(config)) {}

LiveConfig::LiveConfig(config::RunConfig config, int64_t version,
                       std::vector<algo::TeacherSpec> slots)
    : config_(std::move(config)), version_(version), slots_(std::move(slots)) {
  MapTeachers();
}

absl::StatusOr<std::unique_ptr<LiveConfig>> LiveConfig::Restore(const config::RunConfig& file,
                                                                int64_t version,
                                                                const nlohmann::json& state) {
  auto malformed = [](const std::string& what) {
    return absl::DataLossError("checkpoint state.json: live." + what);
  };
  if (!state.is_object()) return malformed(": expected an object");
  const auto assignments = state.find("assignments");
  const auto slots = state.find("teacher_slots");
  if (assignments == state.end() || !assignments->is_array()) {
    return malformed("assignments: expected a list of strings");
  }
  if (slots == state.end() || !slots->is_array()) {
    return malformed("teacher_slots: expected a list of {name, path}");
  }
  std::vector<std::string> sets;
  for (const auto& a : *assignments) {
    if (!a.is_string()) return malformed("assignments: expected a list of strings");
    sets.push_back(a.get<std::string>());
  }
  std::vector<algo::TeacherSpec> specs;
  for (const auto& s : *slots) {
    if (!s.is_object() || !s.contains("name") || !s.contains("path") || !s["name"].is_string() ||
        !s["path"].is_string()) {
      return malformed("teacher_slots: expected a list of {name, path}");
    }
    specs.push_back({s["name"].get<std::string>(), s["path"].get<std::string>()});
  }
  auto config = config::ReapplyLive(file, sets);
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        "the checkpoint's live config (version " + std::to_string(version) +
        ") does not fit this config file:\n" + std::string(config.status().message()));
  }
  std::unique_ptr<LiveConfig> live(new LiveConfig(*std::move(config), version, std::move(specs)));
  for (const config::TeacherSection& teacher : live->config_.opd.teachers) {
    if (live->FindSlot(teacher) < 0) {
      return malformed("teacher_slots: no slot for teacher '" + teacher.name + "'");
    }
  }
  return live;
}

std::vector<dispatch::DatasetQuota> LiveConfig::datasets() const {
  return dispatch::QuotasFromConfig(config_.tasks);
}

int LiveConfig::TeacherSlot(int dataset) const {
  const std::string& name = config_.tasks.datasets.at(dataset).teacher;
  if (name.empty()) return -1;
  const auto it = slot_of_.find(name);
  LOOM_CHECK(it != slot_of_.end(), "dataset teacher " << name << " has no slot");
  return it->second;
}

int LiveConfig::FindSlot(const config::TeacherSection& teacher) const {
  for (size_t s = slots_.size(); s-- > 0;) {
    if (slots_[s].name == teacher.name && slots_[s].path == teacher.path)
      return static_cast<int>(s);
  }
  return -1;
}

void LiveConfig::MapTeachers() {
  slot_of_.clear();
  for (const config::TeacherSection& teacher : config_.opd.teachers) {
    const int slot = FindSlot(teacher);
    if (slot >= 0) slot_of_[teacher.name] = slot;
  }
}

absl::Status LiveConfig::CheckDatasets(const config::RunConfig& next) const {
  const int group = GroupSize(next);
  std::string problems;
  auto problem = [&](const std::string& line) {
    problems += (problems.empty() ? "" : "\n") + line;
  };
  bool any = false;
  for (const config::DatasetSection& d : next.tasks.datasets) {
    if (d.max_inflight > 0 && d.max_inflight < group) {
      problem("tasks.datasets." + d.name + ".max_inflight: expected 0 (no cap) or at least " +
              std::to_string(group) + " (one prompt's group of samples), got " +
              std::to_string(d.max_inflight));
    }
    any = any || (d.active && d.weight > 0);
  }
  if (!any) problem("tasks.datasets: expected at least one active dataset with weight > 0");
  return problems.empty() ? absl::OkStatus() : absl::InvalidArgumentError(problems);
}

absl::StatusOr<std::vector<config::LiveChange>> LiveConfig::Apply(
    const std::vector<std::string>& assignments) {
  std::vector<config::LiveChange> changes;
  auto next = config::ApplyLiveChange(config_, assignments, changes);
  if (!next.ok()) return next.status();
  if (absl::Status s = CheckDatasets(*next); !s.ok()) return s;
  // Teachers that no slot holds yet: checked before any is added.
  std::vector<algo::TeacherSpec> added;
  for (const config::TeacherSection& teacher : next->opd.teachers) {
    if (FindSlot(teacher) >= 0) continue;
    algo::TeacherSpec spec{teacher.name, teacher.path};
    if (pool_ != nullptr) {
      if (auto bytes = pool_->Check(spec); !bytes.ok()) {
        return absl::InvalidArgumentError("opd.teachers." + teacher.name +
                                          ".path: " + std::string(bytes.status().message()));
      }
    }
    added.push_back(std::move(spec));
  }
  for (algo::TeacherSpec& spec : added) {
    if (pool_ != nullptr) {
      auto slot = pool_->Add(spec);
      LOOM_CHECK(slot.ok() && *slot == static_cast<int>(slots_.size()),
                 "teacher " << spec.name << " passed its check but was not added in slot order");
    }
    slots_.push_back(std::move(spec));
  }
  config_ = *std::move(next);
  ++version_;
  MapTeachers();
  return changes;
}

nlohmann::json LiveConfig::State() const {
  nlohmann::json slots = nlohmann::json::array();
  for (const algo::TeacherSpec& spec : slots_) {
    slots.push_back({{"name", spec.name}, {"path", spec.path}});
  }
  return {{"assignments", config::LiveAssignments(config_)}, {"teacher_slots", slots}};
}

}  // namespace loom::train
