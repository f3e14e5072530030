// The samples of a GRPO cursor on disk: samples.json holds each state's JSON
// part (rollout/state_io.h) in two lists, the engine's in-flight samples and
// the finished ones the table holds; samples.safetensors every state's arrays
// under "<id>/<name>".

#include <map>
#include <string>

#include "loom/config/files.h"
#include "loom/rollout/state_io.h"
#include "train/train_state_internal.h"

namespace loom::train {
namespace {

std::string Prefix(uint64_t id) { return std::to_string(id) + "/"; }

void AddTensors(const rollout::SampleState& s, model::TensorMap& all) {
  for (auto& [name, tensor] : rollout::SampleStateTensors(s)) all[Prefix(s.id) + name] = tensor;
}

model::TensorMap TensorsOf(uint64_t id, const model::TensorMap& all) {
  model::TensorMap out;
  const std::string prefix = Prefix(id);
  for (auto it = all.lower_bound(prefix); it != all.end() && it->first.rfind(prefix, 0) == 0;
       ++it) {
    out[it->first.substr(prefix.size())] = it->second;
  }
  return out;
}

absl::Status ReadList(const nlohmann::json& list, const model::TensorMap& tensors,
                      const std::string& source, std::vector<rollout::SampleState>& out) {
  if (!list.is_array()) return absl::DataLossError(source + ": expected a list of samples");
  for (const auto& item : list) {
    if (!item.is_object() || !item.contains("id") || !item["id"].is_number_unsigned()) {
      return absl::DataLossError(source + ": a sample without a numeric id");
    }
    const uint64_t id = item["id"].get<uint64_t>();
    auto state = rollout::SampleStateFromParts(item.dump(), TensorsOf(id, tensors),
                                               source + " sample " + std::to_string(id));
    if (!state.ok()) return absl::DataLossError(std::string(state.status().message()));
    out.push_back(*std::move(state));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteSamples(const TrainState& state, const std::string& dir) {
  if (!state.grpo) return absl::OkStatus();
  nlohmann::json json = {{"inflight", nlohmann::json::array()},
                         {"finished", nlohmann::json::array()}};
  model::TensorMap tensors;
  auto add = [&](const char* list, const rollout::SampleState& s) {
    json[list].push_back(nlohmann::json::parse(rollout::SampleStateJson(s)));
    AddTensors(s, tensors);
  };
  for (const rollout::SampleState& s : state.grpo->inflight) add("inflight", s);
  for (const SampleEntry& entry : state.grpo->samples) {
    if (entry.state) add("finished", *entry.state);
  }
  if (absl::Status s = model::WriteSafetensors(dir + "/samples.safetensors", tensors); !s.ok()) {
    return s;
  }
  return WriteFileAtomic(dir + "/samples.json", json.dump(1));
}

absl::Status ReadSamples(const std::string& dir, TrainState& state) {
  if (!state.grpo) return absl::OkStatus();
  const std::string json_path = dir + "/samples.json";
  auto text = ReadFile(json_path);
  if (!text.ok())
    return absl::DataLossError(json_path + ": " + std::string(text.status().message()));
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object() || !json.contains("inflight") ||
      !json.contains("finished")) {
    return absl::DataLossError(json_path + ": expected {\"inflight\": [...], \"finished\": [...]}");
  }
  auto tensors = model::ReadSafetensors(dir + "/samples.safetensors");
  if (!tensors.ok()) return absl::DataLossError(std::string(tensors.status().message()));
  if (absl::Status s = ReadList(json["inflight"], *tensors, json_path, state.grpo->inflight);
      !s.ok()) {
    return s;
  }
  std::vector<rollout::SampleState> finished;
  if (absl::Status s = ReadList(json["finished"], *tensors, json_path, finished); !s.ok()) return s;
  // Each finished state goes to its entry in state.json.
  std::map<uint64_t, SampleEntry*> entries;
  for (SampleEntry& entry : state.grpo->samples) entries[entry.id] = &entry;
  for (rollout::SampleState& sample : finished) {
    const auto entry = entries.find(sample.id);
    if (entry == entries.end() || entry->second->state) {
      return absl::DataLossError(
          json_path + ": finished sample " + std::to_string(sample.id) +
          (entry == entries.end() ? " has no entry in state.json" : " is listed twice"));
    }
    entry->second->state = std::move(sample);
  }
  return absl::OkStatus();
}

}  // namespace loom::train
