// The samples of a GRPO cursor on disk: samples.json holds each state's JSON
// part (rollout/state_io.h) in two lists, the engine's in-flight samples and
// the finished ones the table holds, and a third, `sequences`, for the further
// sequences of finished harness episodes (SampleEntry::sequences, in order,
// each with its owner's id); samples.safetensors every state's arrays under
// "<id>/<name>" (a sequence's under "<id>.<k>/<name>", k from 1).

#include <map>
#include <string>

#include "loom/config/files.h"
#include "loom/rollout/state_io.h"
#include "train/train_state_internal.h"

namespace loom::train {
namespace {

// A state's tensors' prefix: its id, and for an episode's further sequence its number.
std::string Prefix(uint64_t id, int sequence = 0) {
  return std::to_string(id) + (sequence > 0 ? "." + std::to_string(sequence) : "") + "/";
}

void AddTensors(const rollout::SampleState& s, const std::string& prefix, model::TensorMap& all) {
  for (auto& [name, tensor] : rollout::SampleStateTensors(s)) all[prefix + name] = tensor;
}

model::TensorMap TensorsOf(const std::string& prefix, const model::TensorMap& all) {
  model::TensorMap out;
  for (auto it = all.lower_bound(prefix); it != all.end() && it->first.rfind(prefix, 0) == 0;
       ++it) {
    out[it->first.substr(prefix.size())] = it->second;
  }
  return out;
}

// With `sequences`, the list is of episodes' further sequences: the k-th
// with an id has its tensors under "<id>.<k>/".
absl::Status ReadList(const nlohmann::json& list, const model::TensorMap& tensors,
                      const std::string& source, std::vector<rollout::SampleState>& out,
                      bool sequences = false) {
  if (!list.is_array()) return absl::DataLossError(source + ": expected a list of samples");
  std::map<uint64_t, int> seen;
  for (const auto& item : list) {
    if (!item.is_object() || !item.contains("id") || !item["id"].is_number_unsigned()) {
      return absl::DataLossError(source + ": a sample without a numeric id");
    }
    const uint64_t id = item["id"].get<uint64_t>();
    const int sequence = sequences ? ++seen[id] : 0;
    auto state =
        rollout::SampleStateFromParts(item.dump(), TensorsOf(Prefix(id, sequence), tensors),
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
                         {"finished", nlohmann::json::array()},
                         {"sequences", nlohmann::json::array()}};
  model::TensorMap tensors;
  auto add = [&](const char* list, const rollout::SampleState& s, int sequence = 0) {
    json[list].push_back(nlohmann::json::parse(rollout::SampleStateJson(s)));
    AddTensors(s, Prefix(s.id, sequence), tensors);
  };
  for (const rollout::SampleState& s : state.grpo->inflight) add("inflight", s);
  for (const SampleEntry& entry : state.grpo->samples) {
    if (entry.state) add("finished", *entry.state);
    for (size_t k = 0; k < entry.sequences.size(); ++k) {
      add("sequences", entry.sequences[k], static_cast<int>(k) + 1);
    }
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
  // Checkpoints written before harness episodes have no such list.
  if (!json.contains("sequences")) return absl::OkStatus();
  std::vector<rollout::SampleState> sequences;
  if (absl::Status s = ReadList(json["sequences"], *tensors, json_path, sequences,
                                /*sequences=*/true);
      !s.ok()) {
    return s;
  }
  for (rollout::SampleState& sequence : sequences) {
    const auto entry = entries.find(sequence.id);
    if (entry == entries.end() || !entry->second->state) {
      return absl::DataLossError(json_path + ": sequence of sample " + std::to_string(sequence.id) +
                                 ", which is not a finished one");
    }
    entry->second->sequences.push_back(std::move(sequence));
  }
  return absl::OkStatus();
}

}  // namespace loom::train
