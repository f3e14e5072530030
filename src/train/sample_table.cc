#include "loom/train/sample_table.h"

#include <utility>

#include "loom/agent/episode_record.h"
#include "loom/config/check.h"
#include "loom/config/json_reader.h"

namespace loom::train {

void SampleTable::Admit(SampleEntry entry) {
  const uint64_t id = entry.id;
  const bool added = entries_.emplace(id, std::move(entry)).second;
  LOOM_CHECK(added, "sample " << id << " admitted twice");
}

SampleEntry* SampleTable::Find(uint64_t id) {
  return const_cast<SampleEntry*>(std::as_const(*this).Find(id));
}

const SampleEntry* SampleTable::Find(uint64_t id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second;
}

void SampleTable::Finish(uint64_t id, rollout::SampleState state) {
  SampleEntry* entry = Find(id);
  LOOM_CHECK(entry != nullptr, "finished sample " << id << " is not in the table");
  entry->state = std::move(state);
}

void SampleTable::Erase(uint64_t id) { entries_.erase(id); }

void SampleTable::Fail(uint64_t id, absl::Status status) {
  failures_.emplace_back(id, std::move(status));
}

std::vector<std::pair<uint64_t, absl::Status>> SampleTable::TakeFailures() {
  return std::exchange(failures_, {});
}

std::vector<TrainingSample> SampleTable::Take(
    const std::vector<dispatch::ReadySubgroup>& subgroups) {
  std::vector<TrainingSample> samples;
  for (const dispatch::ReadySubgroup& subgroup : subgroups) {
    for (uint64_t id : subgroup.sample_ids) {
      auto it = entries_.find(id);
      LOOM_CHECK(it != entries_.end() && it->second.state.has_value(), "sample " << id);
      rollout::SampleState state = std::move(*it->second.state);
      it->second.state.reset();
      samples.push_back({std::move(state), std::move(it->second)});
      entries_.erase(it);
    }
  }
  return samples;
}

size_t SampleTable::finished() const {
  size_t n = 0;
  for (const auto& [id, entry] : entries_) n += entry.state.has_value();
  return n;
}

nlohmann::json SampleEntryJson(const SampleEntry& entry) {
  nlohmann::json j = {{"id", entry.id},
                      {"dataset", entry.dataset},
                      {"problem_index", entry.problem_index},
                      {"subgroup_id", entry.subgroup_id},
                      {"effort", entry.effort},
                      {"config_version", entry.config_version},
                      {"teacher", entry.teacher}};
  if (entry.agent) j["agent"] = true;
  if (entry.outcome) j["outcome"] = agent::OutcomeJson(*entry.outcome);
  return j;
}

absl::StatusOr<SampleEntry> SampleEntryFromJson(const nlohmann::json& json,
                                                const std::string& source) {
  JsonReader read(source, absl::StatusCode::kDataLoss);
  SampleEntry entry;
  read.Get(json, "id", entry.id);
  read.Get(json, "dataset", entry.dataset);
  read.Get(json, "problem_index", entry.problem_index);
  read.Get(json, "subgroup_id", entry.subgroup_id);
  read.Get(json, "effort", entry.effort);
  // Checkpoints written before live config versions existed have none: 0.
  read.GetOptional(json, "config_version", entry.config_version);
  read.GetOptional(json, "teacher", entry.teacher);
  read.GetOptional(json, "agent", entry.agent);
  if (!read.ok()) return read.status();
  const std::string sample = source + ": sample " + std::to_string(entry.id);
  const bool outcome = json.contains("outcome"), trajectory = json.contains("trajectory");
  if ((outcome || trajectory) && !entry.agent) {
    return absl::DataLossError(sample + ": only an agent sample has an episode's outcome");
  }
  if (outcome) {
    auto parsed = agent::OutcomeFromJson(json["outcome"], sample + ": outcome");
    if (!parsed.ok()) return parsed.status();
    entry.outcome = *std::move(parsed);
  } else if (trajectory) {  // written before outcomes
    auto parsed = agent::TrajectoryFromJson(json["trajectory"], sample + ": trajectory");
    if (!parsed.ok()) return parsed.status();
    entry.outcome = agent::OutcomeOf(*parsed);
  }
  return entry;
}

}  // namespace loom::train
