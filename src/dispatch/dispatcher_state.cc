// Dispatcher checkpoint state (ExportState / ImportState).

#include <algorithm>

#include "absl/status/status.h"
#include "loom/config/check.h"
#include "loom/dispatch/dispatcher.h"

namespace loom::dispatch {
namespace {

using nlohmann::json;

json GroupToJson(const PromptGroup& group) {
  json subgroups = json::array();
  for (const auto& subgroup : group.subgroups) {
    json samples = json::array();
    for (const auto& t : subgroup.samples) samples.push_back(t.sample_id);
    subgroups.push_back({{"id", subgroup.id}, {"effort", subgroup.effort}, {"samples", samples}});
  }
  return {{"prompt_id", group.prompt_id},
          {"dataset", group.dataset},
          {"problem_index", group.problem_index},
          {"version", group.version},
          {"subgroups", subgroups}};
}

PromptGroup GroupFromJson(const json& j) {
  PromptGroup group;
  group.prompt_id = j.at("prompt_id").get<uint64_t>();
  group.dataset = j.at("dataset").get<int>();
  group.problem_index = j.at("problem_index").get<uint64_t>();
  group.version = j.at("version").get<int64_t>();
  for (const auto& s : j.at("subgroups")) {
    Subgroup subgroup;
    subgroup.id = s.at("id").get<uint64_t>();
    subgroup.effort = s.at("effort").get<int>();
    for (const auto& t : s.at("samples")) {
      // Older checkpoints wrote [sample_id, seed]; the seed was never used.
      const json& id = t.is_array() ? t.at(0) : t;
      subgroup.samples.push_back({id.get<uint64_t>(), subgroup.id, subgroup.effort});
    }
    group.subgroups.push_back(std::move(subgroup));
  }
  return group;
}

json ReadyToJson(const ReadySubgroup& r) {
  return {
      {"subgroup_id", r.subgroup_id},      {"prompt_id", r.prompt_id}, {"dataset", r.dataset},
      {"problem_index", r.problem_index},  {"effort", r.effort},       {"sample_ids", r.sample_ids},
      {"oldest_version", r.oldest_version}};
}

ReadySubgroup ReadyFromJson(const json& j) {
  ReadySubgroup r;
  r.subgroup_id = j.at("subgroup_id").get<uint64_t>();
  r.prompt_id = j.at("prompt_id").get<uint64_t>();
  r.dataset = j.at("dataset").get<int>();
  r.problem_index = j.at("problem_index").get<uint64_t>();
  r.effort = j.at("effort").get<int>();
  r.sample_ids = j.at("sample_ids").get<std::vector<uint64_t>>();
  r.oldest_version = j.at("oldest_version").get<int64_t>();
  return r;
}

}  // namespace

json Dispatcher::ExportState() const {
  json prompts = json::array();
  for (const auto& [id, p] : prompts_) {
    json left = json::array();
    for (const auto& [subgroup, n] : p.subgroup_unfinished) left.push_back({subgroup, n});
    prompts.push_back({{"group", GroupToJson(p.group)},
                       {"unfinished", p.unfinished},
                       {"dropped", p.dropped},
                       {"any_finished", p.any_finished},
                       {"subgroup_unfinished", left}});
  }
  json samples = json::array();
  for (const auto& [id, s] : samples_) {
    samples.push_back({id, s.prompt_id, s.subgroup_id, s.dataset, s.version});
  }
  json ready = json::array();
  for (const auto& r : ready_) ready.push_back(ReadyToJson(r));
  return {{"policy", policy_->name()},
          {"policy_state", policy_->State()},
          {"budget", budget_},
          {"inflight", inflight_},
          {"ready_samples", ready_samples_},
          {"finished_total", finished_total_},
          {"next_id", next_id_},
          {"rng_state", rng_state_},
          {"dataset_inflight", dataset_inflight_},
          {"cursors", cursors_},
          {"prompts", prompts},
          {"samples", samples},
          {"ready", ready},
          {"filter", filter_.Export()},
          {"exhausted", exhausted_}};
}

// Everything ExportState() writes, parsed and checked for consistency.
struct Dispatcher::ParsedState {
  int64_t policy_state = 0, budget = 0, inflight = 0, ready_samples = 0, finished_total = 0;
  uint64_t next_id = 0, rng_state = 0;
  std::vector<int64_t> dataset_inflight;
  std::vector<uint64_t> cursors;
  std::map<uint64_t, PromptState> prompts;
  std::map<uint64_t, InflightSample> samples;
  std::vector<ReadySubgroup> ready;
  nlohmann::json filter;  // null: a checkpoint from before difficulty filters
  std::vector<bool> exhausted;
};

absl::StatusOr<Dispatcher::ParsedState> Dispatcher::ParseState(const json& state) const {
  try {
    if (state.at("policy").get<std::string>() != policy_->name()) {
      return absl::DataLossError("dispatch state is for policy '" +
                                 state.at("policy").get<std::string>() + "', the run uses '" +
                                 policy_->name() + "'");
    }
    ParsedState parsed;
    parsed.dataset_inflight = state.at("dataset_inflight").get<std::vector<int64_t>>();
    parsed.cursors = state.at("cursors").get<std::vector<uint64_t>>();
    if (parsed.cursors.size() != options_.datasets.size() ||
        parsed.dataset_inflight.size() != options_.datasets.size()) {
      return absl::DataLossError("dispatch state has " + std::to_string(parsed.cursors.size()) +
                                 " datasets, the run has " +
                                 std::to_string(options_.datasets.size()));
    }
    for (const auto& p : state.at("prompts")) {
      PromptState prompt;
      prompt.group = GroupFromJson(p.at("group"));
      prompt.unfinished = p.at("unfinished").get<int>();
      prompt.dropped = p.at("dropped").get<bool>();
      prompt.any_finished = p.at("any_finished").get<bool>();
      for (const auto& left : p.at("subgroup_unfinished")) {
        prompt.subgroup_unfinished[left.at(0).get<uint64_t>()] = left.at(1).get<int>();
      }
      parsed.prompts[prompt.group.prompt_id] = std::move(prompt);
    }
    for (const auto& s : state.at("samples")) {
      const uint64_t prompt_id = s.at(1).get<uint64_t>();
      const int dataset = s.at(3).get<int>();
      if (!parsed.prompts.count(prompt_id) || dataset < 0 ||
          dataset >= static_cast<int>(options_.datasets.size())) {
        return absl::DataLossError("dispatch state: sample " + s.at(0).dump() +
                                   " refers to an unknown prompt or dataset");
      }
      parsed.samples[s.at(0).get<uint64_t>()] = {prompt_id, s.at(2).get<uint64_t>(), dataset,
                                                 s.at(4).get<int64_t>()};
    }
    for (const auto& r : state.at("ready")) parsed.ready.push_back(ReadyFromJson(r));
    parsed.policy_state = state.at("policy_state").get<int64_t>();
    parsed.budget = state.at("budget").get<int64_t>();
    parsed.inflight = state.at("inflight").get<int64_t>();
    parsed.ready_samples = state.at("ready_samples").get<int64_t>();
    parsed.finished_total = state.at("finished_total").get<int64_t>();
    parsed.next_id = state.at("next_id").get<uint64_t>();
    parsed.rng_state = state.at("rng_state").get<uint64_t>();
    if (state.contains("filter")) {
      parsed.filter = state.at("filter");
      parsed.exhausted = state.at("exhausted").get<std::vector<bool>>();
      DifficultyFilter check(options_.datasets.size());
      if (absl::Status s = check.Import(parsed.filter); !s.ok()) return s;
    }
    if (parsed.exhausted.empty()) parsed.exhausted.assign(options_.datasets.size(), false);
    if (parsed.exhausted.size() != options_.datasets.size()) {
      return absl::DataLossError("dispatch state: exhausted lists " +
                                 std::to_string(parsed.exhausted.size()) + " datasets");
    }
    if (parsed.inflight != static_cast<int64_t>(parsed.samples.size())) {
      return absl::DataLossError("dispatch state: inflight " + std::to_string(parsed.inflight) +
                                 " but " + std::to_string(parsed.samples.size()) +
                                 " samples listed");
    }
    return parsed;
  } catch (const json::exception& e) {
    return absl::DataLossError(std::string("dispatch state is malformed: ") + e.what());
  }
}

absl::Status Dispatcher::ImportState(const json& state) {
  auto parsed = ParseState(state);
  if (!parsed.ok()) return parsed.status();
  policy_->SetState(parsed->policy_state);
  budget_ = parsed->budget;
  inflight_ = parsed->inflight;
  ready_samples_ = parsed->ready_samples;
  finished_total_ = parsed->finished_total;
  next_id_ = parsed->next_id;
  rng_state_ = parsed->rng_state;
  dataset_inflight_ = std::move(parsed->dataset_inflight);
  cursors_ = std::move(parsed->cursors);
  prompts_ = std::move(parsed->prompts);
  samples_ = std::move(parsed->samples);
  ready_ = std::move(parsed->ready);
  ImportFilter(*parsed);
  return absl::OkStatus();
}

void Dispatcher::ImportFilter(const ParsedState& parsed) {
  filter_ = DifficultyFilter(options_.datasets.size());
  if (!parsed.filter.is_null()) {
    const absl::Status s = filter_.Import(parsed.filter);
    LOOM_CHECK(s.ok(), "a filter state ParseState accepted fails: " << s.message());
  }
  exhausted_ = parsed.exhausted;
}

absl::Status Dispatcher::AdoptState(const json& state) {
  auto parsed = ParseState(state);
  if (!parsed.ok()) return parsed.status();
  for (const auto& [id, prompt] : parsed->prompts) {
    if (prompts_.count(id)) {
      return absl::DataLossError("dispatch state to take over: prompt " + std::to_string(id) +
                                 " is this rank's too");
    }
  }
  prompts_.merge(parsed->prompts);
  samples_.merge(parsed->samples);
  ready_.insert(ready_.end(), parsed->ready.begin(), parsed->ready.end());
  inflight_ += parsed->inflight;
  ready_samples_ += parsed->ready_samples;
  finished_total_ += parsed->finished_total;
  for (size_t d = 0; d < dataset_inflight_.size(); ++d) {
    dataset_inflight_[d] += parsed->dataset_inflight[d];
  }
  next_id_ = std::max(next_id_, parsed->next_id);  // no id it used is given again
  return absl::OkStatus();
}

absl::Status Dispatcher::ContinueStreamOf(const json& state) {
  auto parsed = ParseState(state);
  if (!parsed.ok()) return parsed.status();
  next_id_ = std::max(next_id_, parsed->next_id);
  cursors_ = std::move(parsed->cursors);
  rng_state_ = parsed->rng_state;
  ImportFilter(*parsed);  // every rank's is the same: each records every rank's verdicts
  return absl::OkStatus();
}

}  // namespace loom::dispatch
