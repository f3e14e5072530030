#include "loom/train/sample_table.h"

#include <utility>

#include "loom/config/check.h"

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

}  // namespace loom::train
