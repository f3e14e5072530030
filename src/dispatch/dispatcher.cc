#include "loom/dispatch/dispatcher.h"

#include <algorithm>

#include "absl/status/status.h"
#include "loom/base/random.h"
#include "loom/config/check.h"

namespace loom::dispatch {
namespace {

// A difficulty filter tallies tasks by their content keys: none without them.
absl::Status CheckProblemKeys(const DispatchOptions& o, const std::vector<DatasetQuota>& datasets) {
  for (const DatasetQuota& d : datasets) {
    if (d.filter.on() && !o.problem_key) {
      return absl::InvalidArgumentError("dispatch: dataset '" + d.name +
                                        "' has a difficulty filter but no problem keys");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const DispatchOptions& o, int group_size) {
  auto error = [](const std::string& text) { return absl::InvalidArgumentError(text); };
  if (o.efforts.empty()) return error("dispatch: no effort levels");
  if (o.ranks < 1 || o.rank < 0 || o.rank >= o.ranks) {
    return error("dispatch: rank " + std::to_string(o.rank) + " of " + std::to_string(o.ranks));
  }
  if (group_size > o.max_inflight) {
    return error("dispatch: a prompt's group (" + std::to_string(group_size) +
                 " samples = sum of effort.samples_per_level) exceeds async.max_inflight (" +
                 std::to_string(o.max_inflight) + ")");
  }
  if (absl::Status s = CheckProblemKeys(o, o.datasets); !s.ok()) return s;
  if (o.policy == "sync" && SyncWaveSamples(o.batch_samples, group_size) > o.max_inflight) {
    return error("dispatch: sync generates a whole batch at once: async.batch_samples (" +
                 std::to_string(o.batch_samples) + ", rounded up to whole groups) exceeds " +
                 "async.max_inflight (" + std::to_string(o.max_inflight) + ")");
  }
  return CheckDatasets(o.datasets, group_size);
}

}  // namespace

std::vector<DatasetQuota> QuotasFromConfig(const config::TasksSection& tasks) {
  std::vector<DatasetQuota> quotas;
  for (const auto& d : tasks.datasets) {
    quotas.push_back(
        {d.name,
         d.active ? d.weight : 0.0,
         d.max_inflight,
         {d.filter.min_pass, d.filter.max_pass, d.filter.after_attempts, d.filter.window}});
  }
  return quotas;
}

absl::Status CheckDatasets(const std::vector<DatasetQuota>& datasets, int group_size) {
  bool any = false;
  for (const auto& d : datasets) {
    if (d.max_inflight > 0 && d.max_inflight < group_size) {
      return absl::InvalidArgumentError(
          "dispatch: dataset '" + d.name + "' has max_inflight " + std::to_string(d.max_inflight) +
          ", below one prompt's group (" + std::to_string(group_size) +
          " samples): it could never be dispatched");
    }
    if (!(d.filter.min_pass >= 0 && d.filter.min_pass <= d.filter.max_pass &&
          d.filter.max_pass <= 1 && d.filter.after_attempts >= 0 && d.filter.window >= 0 &&
          d.filter.window <= FilterBand::kMaxWindow)) {
      return absl::InvalidArgumentError(
          "dispatch: dataset '" + d.name +
          "' has a difficulty filter outside 0 <= min_pass <= max_pass <= 1, after_attempts >= "
          "0, 0 <= window <= " +
          std::to_string(FilterBand::kMaxWindow));
    }
    any = any || d.weight > 0;
  }
  if (!any) return absl::InvalidArgumentError("dispatch: no active dataset with weight > 0");
  return absl::OkStatus();
}

int PromptGroup::size() const {
  int n = 0;
  for (const auto& s : subgroups) n += static_cast<int>(s.samples.size());
  return n;
}

DispatchOptions DispatchOptions::FromConfig(const config::AsyncSection& async,
                                            const config::EffortSection& effort,
                                            const config::TasksSection& tasks, uint64_t seed) {
  DispatchOptions o;
  o.policy = async.dispatch;
  o.max_inflight = async.max_inflight;
  o.batch_samples = async.batch_samples;
  o.max_staleness = async.max_staleness;
  o.warmup_drop_samples = async.warmup_drop_samples;
  for (size_t i = 0; i < effort.levels.size(); ++i) {
    o.efforts.push_back({effort.levels[i], effort.SamplesAt(i)});
  }
  o.datasets = QuotasFromConfig(tasks);
  o.seed = seed;
  return o;
}

absl::StatusOr<std::unique_ptr<Dispatcher>> Dispatcher::Create(DispatchOptions options) {
  auto policy = MakePolicy(options.policy);
  if (!policy.ok()) return policy.status();
  int group_size = 0;
  for (const auto& e : options.efforts) group_size += e.samples;
  if (auto status = CheckOptions(options, group_size); !status.ok()) return status;
  return std::unique_ptr<Dispatcher>(new Dispatcher(std::move(options), std::move(*policy)));
}

Dispatcher::Dispatcher(DispatchOptions options, std::unique_ptr<DispatchPolicy> policy)
    : options_(std::move(options)),
      policy_(std::move(policy)),
      rng_state_(Mix64(options_.seed ^ 0x64697370ULL)),
      dataset_inflight_(options_.datasets.size(), 0),
      cursors_(options_.datasets.size(), 0),
      filter_(options_.datasets.size()),
      exhausted_(options_.datasets.size(), false) {
  for (const auto& e : options_.efforts) group_size_ += e.samples;
  budget_ = policy_->InitialBudget(View());
}

PolicyView Dispatcher::View() const {
  PolicyView view;
  view.inflight = inflight_;
  view.ready_samples = ready_samples_;
  view.budget = budget_;
  view.group_size = group_size_;
  view.max_inflight = options_.max_inflight;
  view.batch_samples = options_.batch_samples;
  return view;
}

bool Dispatcher::StalenessAllowsDispatch() const {
  const int64_t horizon = static_cast<int64_t>(options_.max_staleness + 1) * options_.batch_samples;
  return inflight_ + ready_samples_ < horizon;
}

std::optional<int> Dispatcher::PickDataset() {
  std::vector<double> weights(options_.datasets.size(), 0.0);
  double total = 0;
  for (size_t d = 0; d < weights.size(); ++d) {
    const auto& quota = options_.datasets[d];
    const bool room =
        quota.max_inflight == 0 || dataset_inflight_[d] + group_size_ <= quota.max_inflight;
    weights[d] = room && !exhausted_[d] ? std::max(0.0, quota.weight) : 0.0;
    total += weights[d];
  }
  if (total <= 0) return std::nullopt;
  // 53 random bits -> [0, total).
  double x = UnitInterval(Mix64(rng_state_++)) * total;
  for (size_t d = 0; d < weights.size(); ++d) {
    if (weights[d] > 0 && x < weights[d]) return static_cast<int>(d);
    x -= weights[d];
  }
  for (size_t d = weights.size(); d-- > 0;) {
    if (weights[d] > 0) return static_cast<int>(d);  // rounding at the top end
  }
  return std::nullopt;
}

std::optional<std::pair<int, uint64_t>> Dispatcher::PickInRound() {
  std::optional<std::pair<int, uint64_t>> mine;
  for (int j = 0; j < options_.ranks; ++j) {
    std::optional<int> dataset;
    std::optional<uint64_t> index;
    while (!index) {
      dataset = PickDataset();
      if (!dataset) return std::nullopt;
      index = NextProblem(*dataset);
    }
    if (j == options_.rank) mine = {*dataset, *index};
  }
  return mine;
}

std::optional<uint64_t> Dispatcher::NextProblem(int dataset) {
  if (filter_.retired(dataset) == 0) return cursors_[dataset]++;
  // Every 2N consecutive cursor indices hold a whole epoch of N problems.
  constexpr uint64_t kUnboundedDraws = 10000;
  const uint64_t problems = options_.datasets[dataset].problems;
  const uint64_t draws = problems > 0 ? 2 * problems : kUnboundedDraws;
  for (uint64_t i = 0; i < draws; ++i) {
    const uint64_t index = cursors_[dataset]++;
    if (!filter_.Retired(dataset, options_.problem_key(dataset, index))) return index;
    ++stats_.problems_skipped;
  }
  exhausted_[dataset] = true;
  return std::nullopt;
}

std::vector<FilterBand> Dispatcher::Bands() const {
  std::vector<FilterBand> bands;
  for (const DatasetQuota& d : options_.datasets) bands.push_back(d.filter);
  return bands;
}

void Dispatcher::RecordVerdicts(const std::vector<TaskVerdict>& verdicts) {
  filter_.Record(verdicts, Bands());
}

void Dispatcher::SeedFilter(int dataset, const std::string& key, const std::string& name,
                            int64_t attempts, int64_t passes) {
  filter_.Seed(dataset, key, name, attempts, passes);
}

void Dispatcher::RetireOutsideBands() { filter_.Reconsider(Bands()); }

std::vector<std::string> Dispatcher::ExhaustedDatasets() const {
  std::vector<std::string> names;
  for (size_t d = 0; d < exhausted_.size(); ++d) {
    if (exhausted_[d]) names.push_back(options_.datasets[d].name);
  }
  return names;
}

PromptGroup Dispatcher::NewGroup(int dataset, uint64_t problem_index, int64_t version) {
  PromptGroup group;
  // The ids one group takes: its prompt, its subgroups, its samples.
  const uint64_t span = 1 + options_.efforts.size() + static_cast<uint64_t>(group_size_);
  const auto rank = static_cast<uint64_t>(options_.rank),
             ranks = static_cast<uint64_t>(options_.ranks);
  next_id_ += span * rank;  // the lower ranks' groups of this round
  group.prompt_id = next_id_++;
  group.dataset = dataset;
  group.problem_index = problem_index;
  group.version = version;
  for (const auto& level : options_.efforts) {
    Subgroup subgroup;
    subgroup.id = next_id_++;
    subgroup.effort = level.effort;
    for (int i = 0; i < level.samples; ++i) {
      SampleTicket ticket;
      ticket.sample_id = next_id_++;
      ticket.subgroup_id = subgroup.id;
      ticket.effort = level.effort;
      subgroup.samples.push_back(ticket);
    }
    group.subgroups.push_back(std::move(subgroup));
  }
  next_id_ += span * (ranks - 1 - rank);  // the higher ranks'
  return group;
}

void Dispatcher::Admit(const PromptGroup& group, RolloutPort& engine) {
  PromptState& state = prompts_[group.prompt_id];
  state.group = group;
  state.unfinished = group.size();
  for (const auto& subgroup : group.subgroups) {
    state.subgroup_unfinished[subgroup.id] = static_cast<int>(subgroup.samples.size());
    for (const auto& ticket : subgroup.samples) {
      samples_[ticket.sample_id] = {group.prompt_id, subgroup.id, group.dataset, group.version};
    }
  }
  inflight_ += group.size();
  dataset_inflight_[group.dataset] += group.size();
  budget_ -= group.size();
  ++stats_.prompts_dispatched;
  engine.Admit(group);
}

absl::Status Dispatcher::SetDatasets(std::vector<DatasetQuota> datasets) {
  if (datasets.size() != options_.datasets.size()) {
    return absl::InvalidArgumentError("dispatch: " + std::to_string(datasets.size()) +
                                      " datasets given, the run has " +
                                      std::to_string(options_.datasets.size()));
  }
  for (size_t d = 0; d < datasets.size(); ++d) {
    if (datasets[d].name != options_.datasets[d].name) {
      return absl::InvalidArgumentError("dispatch: dataset " + std::to_string(d) + " is '" +
                                        options_.datasets[d].name + "', not '" + datasets[d].name +
                                        "'");
    }
  }
  if (absl::Status s = CheckDatasets(datasets, group_size_); !s.ok()) return s;
  if (absl::Status s = CheckProblemKeys(options_, datasets); !s.ok()) return s;
  for (size_t d = 0; d < datasets.size(); ++d) {
    datasets[d].problems = options_.datasets[d].problems;  // the data, not the mix
  }
  options_.datasets = std::move(datasets);
  filter_.Reconsider(Bands());  // a narrower band retires what it now excludes
  return absl::OkStatus();
}

int Dispatcher::Refill(RolloutPort& engine) {
  budget_ = std::min<int64_t>(budget_ + policy_->OnRefill(View()), options_.max_inflight);
  int admitted = 0;
  while (budget_ >= group_size_ && inflight_ + group_size_ <= options_.max_inflight &&
         StalenessAllowsDispatch()) {
    const std::optional<std::pair<int, uint64_t>> pick = PickInRound();
    if (!pick) break;  // every dataset is at its cap
    Admit(NewGroup(pick->first, pick->second, engine.PolicyVersion()), engine);
    ++admitted;
  }
  RecordRefill();
  return admitted;
}

Disposition Dispatcher::OnSampleFinished(uint64_t sample_id) {
  auto it = samples_.find(sample_id);
  LOOM_CHECK(it != samples_.end(), "sample " << sample_id << " is not in flight");
  const InflightSample sample = it->second;
  samples_.erase(it);
  --inflight_;
  --dataset_inflight_[sample.dataset];
  ++stats_.samples_finished;
  PromptState& prompt = prompts_.at(sample.prompt_id);
  // A prompt whose first finish comes during warm-up is dropped whole, so no
  // subgroup of it can already be ready.
  if (!prompt.any_finished && finished_total_ < options_.warmup_drop_samples) {
    prompt.dropped = true;
  }
  prompt.any_finished = true;
  ++finished_total_;
  const bool prompt_done = --prompt.unfinished == 0;
  if (--prompt.subgroup_unfinished[sample.subgroup_id] == 0 && !prompt.dropped) {
    MarkSubgroupReady(prompt, sample.subgroup_id);
  }
  budget_ = std::min<int64_t>(budget_ + policy_->OnSampleFinished(prompt_done, View()),
                              options_.max_inflight);
  const Disposition disposition = prompt.dropped ? Disposition::kDrop : Disposition::kKeep;
  if (prompt.dropped) ++stats_.samples_dropped;
  if (prompt_done) prompts_.erase(sample.prompt_id);
  return disposition;
}

Disposition Dispatcher::OnSampleFailed(uint64_t sample_id) {
  auto it = samples_.find(sample_id);
  LOOM_CHECK(it != samples_.end(), "sample " << sample_id << " is not in flight");
  prompts_.at(it->second.prompt_id).dropped = true;
  ++stats_.samples_failed;
  return OnSampleFinished(sample_id);
}

void Dispatcher::MarkSubgroupReady(PromptState& prompt, uint64_t subgroup_id) {
  const PromptGroup& group = prompt.group;
  for (const auto& subgroup : group.subgroups) {
    if (subgroup.id != subgroup_id) continue;
    ReadySubgroup ready;
    ready.subgroup_id = subgroup.id;
    ready.prompt_id = group.prompt_id;
    ready.dataset = group.dataset;
    ready.problem_index = group.problem_index;
    ready.effort = subgroup.effort;
    for (const auto& ticket : subgroup.samples) ready.sample_ids.push_back(ticket.sample_id);
    ready.oldest_version = group.version;
    ready_samples_ += static_cast<int64_t>(ready.sample_ids.size());
    ready_.push_back(std::move(ready));
  }
}

bool Dispatcher::LeftoversStayFresh(int64_t next_version,
                                    const std::vector<ReadySubgroup>& leftovers) const {
  for (const auto& [id, sample] : samples_) {
    if (prompts_.at(sample.prompt_id).dropped) continue;  // never trained on
    if (next_version - sample.version > options_.max_staleness) return false;
  }
  for (const auto& subgroup : leftovers) {
    if (next_version - subgroup.oldest_version > options_.max_staleness) return false;
  }
  return true;
}

std::optional<Dispatcher::BatchPlan> Dispatcher::PlanBatch(int64_t policy_version) const {
  if (ready_.empty()) return std::nullopt;
  if (policy_->TrainsOnlyWhenIdle() ? inflight_ > 0 : ready_samples_ < options_.batch_samples) {
    return std::nullopt;
  }
  std::vector<ReadySubgroup> pool = ready_;
  std::stable_sort(pool.begin(), pool.end(), [](const ReadySubgroup& a, const ReadySubgroup& b) {
    return a.oldest_version < b.oldest_version;
  });
  // Oldest first up to batch_samples (sync: everything), then any leftover
  // that would be too old after this step.
  std::vector<ReadySubgroup> batch, leftovers;
  int64_t taken = 0;
  for (auto& subgroup : pool) {
    const bool needed = policy_->TrainsOnlyWhenIdle() || taken < options_.batch_samples ||
                        policy_version + 1 - subgroup.oldest_version > options_.max_staleness;
    if (needed) taken += static_cast<int64_t>(subgroup.sample_ids.size());
    (needed ? batch : leftovers).push_back(std::move(subgroup));
  }
  if (!LeftoversStayFresh(policy_version + 1, leftovers)) return std::nullopt;
  return BatchPlan{std::move(batch), std::move(leftovers), taken};
}

bool Dispatcher::BatchReady(int64_t policy_version) const {
  return PlanBatch(policy_version).has_value();
}

std::optional<std::vector<ReadySubgroup>> Dispatcher::TakeBatch(int64_t policy_version) {
  std::optional<BatchPlan> plan = PlanBatch(policy_version);
  if (!plan) return std::nullopt;
  for (const auto& subgroup : plan->batch) {
    LOOM_CHECK(policy_version - subgroup.oldest_version <= options_.max_staleness,
               "subgroup " << subgroup.subgroup_id << " from version " << subgroup.oldest_version
                           << " trained at " << policy_version);
  }
  ready_ = std::move(plan->leftovers);
  ready_samples_ -= plan->taken;
  return std::move(plan->batch);
}

void Dispatcher::RecordRefill() {
  if (stats_.refills == 0) stats_.inflight_min = stats_.inflight_max = inflight_;
  ++stats_.refills;
  inflight_sum_ += static_cast<double>(inflight_);
  stats_.inflight_min = std::min(stats_.inflight_min, inflight_);
  stats_.inflight_max = std::max(stats_.inflight_max, inflight_);
  stats_.inflight_mean = inflight_sum_ / static_cast<double>(stats_.refills);
}

DispatchStats Dispatcher::TakeStats() {
  DispatchStats stats = stats_;
  stats_ = DispatchStats{};
  inflight_sum_ = 0;
  return stats;
}

}  // namespace loom::dispatch
