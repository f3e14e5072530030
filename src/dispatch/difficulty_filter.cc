#include "loom/dispatch/difficulty_filter.h"

namespace loom::dispatch {

void DifficultyFilter::Seed(int dataset, const std::string& key, const std::string& name,
                            int64_t attempts, int64_t passes) {
  Tally& tally = tallies_.at(static_cast<size_t>(dataset))[key];
  if (tally.name.empty()) tally.name = name;
  tally.attempts += attempts;
  tally.passes += passes;
}

void DifficultyFilter::Consider(int dataset, const std::string& key, Tally& tally,
                                const FilterBand& band) {
  if (tally.retired || !band.on() || tally.attempts < band.after_attempts) return;
  const double rate = static_cast<double>(tally.passes) / static_cast<double>(tally.attempts);
  if (rate >= band.min_pass && rate <= band.max_pass) return;
  tally.retired = true;
  ++retired_[static_cast<size_t>(dataset)];
  pending_.push_back({dataset, key, tally.name, tally.attempts, tally.passes, tally.seeded_only});
}

void DifficultyFilter::Record(const std::vector<TaskVerdict>& verdicts,
                              const std::vector<FilterBand>& bands) {
  for (const TaskVerdict& v : verdicts) {
    Tally& tally = tallies_.at(static_cast<size_t>(v.dataset))[v.key];
    tally.name = v.name;
    ++tally.attempts;
    tally.passes += v.passed ? 1 : 0;
    tally.seeded_only = false;
  }
  // Retire after the whole batch: a group's samples count together.
  for (const TaskVerdict& v : verdicts) {
    Consider(v.dataset, v.key, tallies_[static_cast<size_t>(v.dataset)].at(v.key),
             bands.at(static_cast<size_t>(v.dataset)));
  }
}

void DifficultyFilter::Reconsider(const std::vector<FilterBand>& bands) {
  for (size_t d = 0; d < tallies_.size(); ++d) {
    for (auto& [key, tally] : tallies_[d]) Consider(static_cast<int>(d), key, tally, bands.at(d));
  }
}

bool DifficultyFilter::Retired(int dataset, const std::string& key) const {
  const auto& tallies = tallies_.at(static_cast<size_t>(dataset));
  const auto it = tallies.find(key);
  return it != tallies.end() && it->second.retired;
}

std::vector<Retirement> DifficultyFilter::TakeRetirements() {
  std::vector<Retirement> taken;
  taken.swap(pending_);
  return taken;
}

nlohmann::json DifficultyFilter::Export() const {
  nlohmann::json datasets = nlohmann::json::array();
  for (const auto& tallies : tallies_) {
    nlohmann::json tasks = nlohmann::json::array();
    for (const auto& [key, t] : tallies) {
      tasks.push_back({key, t.name, t.attempts, t.passes, t.retired, t.seeded_only});
    }
    datasets.push_back(std::move(tasks));
  }
  nlohmann::json pending = nlohmann::json::array();
  for (const Retirement& r : pending_) {
    pending.push_back({r.dataset, r.key, r.name, r.attempts, r.passes, r.from_history});
  }
  return {{"datasets", datasets}, {"pending", pending}};
}

absl::Status DifficultyFilter::Import(const nlohmann::json& state) {
  try {
    const nlohmann::json& datasets = state.at("datasets");
    if (!datasets.is_array() || datasets.size() != tallies_.size()) {
      return absl::DataLossError("difficulty filter state has " +
                                 std::to_string(datasets.is_array() ? datasets.size() : 0) +
                                 " datasets, the run has " + std::to_string(tallies_.size()));
    }
    std::vector<std::map<std::string, Tally>> tallies(tallies_.size());
    std::vector<int64_t> retired(tallies_.size(), 0);
    for (size_t d = 0; d < tallies.size(); ++d) {
      for (const nlohmann::json& t : datasets[d]) {
        const Tally tally{t.at(1).get<std::string>(), t.at(2).get<int64_t>(),
                          t.at(3).get<int64_t>(), t.at(4).get<bool>(), t.at(5).get<bool>()};
        tallies[d][t.at(0).get<std::string>()] = tally;
        retired[d] += tally.retired;
      }
    }
    std::vector<Retirement> pending;
    for (const nlohmann::json& r : state.at("pending")) {
      const int dataset = r.at(0).get<int>();
      if (dataset < 0 || dataset >= static_cast<int>(tallies.size())) {
        return absl::DataLossError("difficulty filter state: a retirement names dataset " +
                                   std::to_string(dataset));
      }
      pending.push_back({dataset, r.at(1).get<std::string>(), r.at(2).get<std::string>(),
                         r.at(3).get<int64_t>(), r.at(4).get<int64_t>(), r.at(5).get<bool>()});
    }
    tallies_ = std::move(tallies);
    retired_ = std::move(retired);
    pending_ = std::move(pending);
    return absl::OkStatus();
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(std::string("difficulty filter state is malformed: ") + e.what());
  }
}

}  // namespace loom::dispatch
