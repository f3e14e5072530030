#include "loom/dispatch/difficulty_filter.h"

#include <algorithm>

namespace loom::dispatch {

void DifficultyFilter::Seed(int dataset, const std::string& key, const std::string& name,
                            int64_t attempts, int64_t passes) {
  Tally& tally = tallies_.at(static_cast<size_t>(dataset))[key];
  if (tally.name.empty()) tally.name = name;
  tally.attempts += attempts;
  tally.passes += passes;
}

double DifficultyFilter::PassRate(const Tally& tally, const FilterBand& band) {
  const int judged = std::min(band.window, tally.recent_count);
  if (judged == 0 || judged < std::min(band.window, band.after_attempts)) {
    return static_cast<double>(tally.passes) / static_cast<double>(tally.attempts);
  }
  const uint64_t mask = judged == 64 ? ~uint64_t{0} : (uint64_t{1} << judged) - 1;
  return __builtin_popcountll(tally.recent & mask) / static_cast<double>(judged);
}

void DifficultyFilter::Consider(int dataset, const std::string& key, Tally& tally,
                                const FilterBand& band) {
  if (tally.retired || !band.on() || tally.attempts < band.after_attempts) return;
  const double rate = PassRate(tally, band);
  if (rate >= band.min_pass && rate <= band.max_pass) return;
  tally.retired = true;
  ++retired_[static_cast<size_t>(dataset)];
  pending_.push_back(
      {dataset, key, tally.name, tally.attempts, tally.passes, rate, tally.seeded_only});
}

void DifficultyFilter::Record(const std::vector<TaskVerdict>& verdicts,
                              const std::vector<FilterBand>& bands) {
  for (const TaskVerdict& v : verdicts) {
    Tally& tally = tallies_.at(static_cast<size_t>(v.dataset))[v.key];
    tally.name = v.name;
    ++tally.attempts;
    tally.passes += v.passed ? 1 : 0;
    tally.seeded_only = false;
    tally.recent = (tally.recent << 1) | (v.passed ? 1 : 0);
    tally.recent_count = std::min(tally.recent_count + 1, FilterBand::kMaxWindow);
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
      tasks.push_back(
          {key, t.name, t.attempts, t.passes, t.retired, t.seeded_only, t.recent, t.recent_count});
    }
    datasets.push_back(std::move(tasks));
  }
  nlohmann::json pending = nlohmann::json::array();
  for (const Retirement& r : pending_) {
    pending.push_back(
        {r.dataset, r.key, r.name, r.attempts, r.passes, r.from_history, r.pass_rate});
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
        Tally tally{t.at(1).get<std::string>(), t.at(2).get<int64_t>(), t.at(3).get<int64_t>(),
                    t.at(4).get<bool>(), t.at(5).get<bool>()};
        if (t.size() > 6) {  // states written before the window have no recent verdicts
          tally.recent = t.at(6).get<uint64_t>();
          tally.recent_count = t.at(7).get<int>();
          if (tally.recent_count < 0 || tally.recent_count > FilterBand::kMaxWindow) {
            return absl::DataLossError("difficulty filter state: a task has " +
                                       std::to_string(tally.recent_count) + " recent verdicts");
          }
        }
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
      const int64_t attempts = r.at(3).get<int64_t>(), passes = r.at(4).get<int64_t>();
      const double rate = r.size() > 6 ? r.at(6).get<double>()
                                       : static_cast<double>(passes) /
                                             static_cast<double>(std::max<int64_t>(attempts, 1));
      pending.push_back({dataset, r.at(1).get<std::string>(), r.at(2).get<std::string>(), attempts,
                         passes, rate, r.at(5).get<bool>()});
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
