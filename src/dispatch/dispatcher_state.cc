// Dispatcher checkpoint state (ExportState / ImportState).

#include "absl/status/status.h"
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
          {"ready", ready}};
}

absl::Status Dispatcher::ImportState(const json& state) {
  try {
    if (state.at("policy").get<std::string>() != policy_->name()) {
      return absl::DataLossError("dispatch state is for policy '" +
                                 state.at("policy").get<std::string>() + "', the run uses '" +
                                 policy_->name() + "'");
    }
    auto dataset_inflight = state.at("dataset_inflight").get<std::vector<int64_t>>();
    auto cursors = state.at("cursors").get<std::vector<uint64_t>>();
    if (cursors.size() != options_.datasets.size() ||
        dataset_inflight.size() != options_.datasets.size()) {
      return absl::DataLossError("dispatch state has " + std::to_string(cursors.size()) +
                                 " datasets, the run has " +
                                 std::to_string(options_.datasets.size()));
    }
    std::map<uint64_t, PromptState> prompts;
    for (const auto& p : state.at("prompts")) {
      PromptState prompt;
      prompt.group = GroupFromJson(p.at("group"));
      prompt.unfinished = p.at("unfinished").get<int>();
      prompt.dropped = p.at("dropped").get<bool>();
      prompt.any_finished = p.at("any_finished").get<bool>();
      for (const auto& left : p.at("subgroup_unfinished")) {
        prompt.subgroup_unfinished[left.at(0).get<uint64_t>()] = left.at(1).get<int>();
      }
      prompts[prompt.group.prompt_id] = std::move(prompt);
    }
    std::map<uint64_t, InflightSample> samples;
    for (const auto& s : state.at("samples")) {
      const uint64_t prompt_id = s.at(1).get<uint64_t>();
      const int dataset = s.at(3).get<int>();
      if (!prompts.count(prompt_id) || dataset < 0 ||
          dataset >= static_cast<int>(options_.datasets.size())) {
        return absl::DataLossError("dispatch state: sample " + s.at(0).dump() +
                                   " refers to an unknown prompt or dataset");
      }
      samples[s.at(0).get<uint64_t>()] = {prompt_id, s.at(2).get<uint64_t>(), dataset,
                                          s.at(4).get<int64_t>()};
    }
    std::vector<ReadySubgroup> ready;
    for (const auto& r : state.at("ready")) ready.push_back(ReadyFromJson(r));
    const auto policy_state = state.at("policy_state").get<int64_t>();
    const auto budget = state.at("budget").get<int64_t>();
    const auto inflight = state.at("inflight").get<int64_t>();
    const auto ready_samples = state.at("ready_samples").get<int64_t>();
    const auto finished_total = state.at("finished_total").get<int64_t>();
    const auto next_id = state.at("next_id").get<uint64_t>();
    const auto rng_state = state.at("rng_state").get<uint64_t>();
    if (inflight != static_cast<int64_t>(samples.size())) {
      return absl::DataLossError("dispatch state: inflight " + std::to_string(inflight) + " but " +
                                 std::to_string(samples.size()) + " samples listed");
    }
    // Everything parsed and consistent: commit.
    policy_->SetState(policy_state);
    budget_ = budget;
    inflight_ = inflight;
    ready_samples_ = ready_samples;
    finished_total_ = finished_total;
    next_id_ = next_id;
    rng_state_ = rng_state;
    dataset_inflight_ = std::move(dataset_inflight);
    cursors_ = std::move(cursors);
    prompts_ = std::move(prompts);
    samples_ = std::move(samples);
    ready_ = std::move(ready);
    return absl::OkStatus();
  } catch (const json::exception& e) {
    return absl::DataLossError(std::string("dispatch state is malformed: ") + e.what());
  }
}

}  // namespace loom::dispatch
