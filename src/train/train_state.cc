// TrainState on disk: state.json (cursors, dispatcher, sample records),
// optimizer and RNG tensors, the model and config. The samples' own files are
// in train_state_samples.cc.

#include "loom/train/train_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <mutex>

#include "loom/config/check.h"
#include "loom/config/files.h"
#include "loom/config/json_reader.h"
#include "train/train_state_internal.h"

namespace loom::train {
namespace fs = std::filesystem;
namespace {

constexpr int kFormatVersion = 1;

nlohmann::json StateJson(const TrainState& state) {
  const RunCursor& c = state.cursor;
  nlohmann::json j = {{"format_version", kFormatVersion},
                      {"stage_index", c.stage_index},
                      {"stage", c.stage},
                      {"step", c.step},
                      {"policy_version", c.policy_version},
                      {"config_version", c.config_version}};
  if (!c.live.is_null()) j["live"] = c.live;
  if (state.sft) j["sft"] = {{"rng", state.sft->rng}, {"next_index", state.sft->next_index}};
  if (state.grpo) {
    nlohmann::json records = nlohmann::json::array();
    for (const SampleEntry& entry : state.grpo->samples) {
      nlohmann::json record = SampleEntryJson(entry);
      const auto episode = state.grpo->episodes.find(entry.id);
      if (episode != state.grpo->episodes.end()) record["episode"] = episode->second;
      records.push_back(std::move(record));
    }
    j["grpo"] = {{"dispatcher", state.grpo->dispatcher},
                 {"records", records},
                 {"prefill_tokens", state.grpo->prefill_tokens},
                 {"decode_tokens", state.grpo->decode_tokens}};
  }
  return j;
}

// A record of state.json's grpo.records: the sample's entry and, on an
// agent sample that has not ended, its running episode's record.
absl::Status ParseRecord(const nlohmann::json& r, const std::string& source, GrpoCursor& grpo) {
  auto entry = SampleEntryFromJson(r, source);
  if (!entry.ok()) return entry.status();
  if (r.contains("episode")) {
    const nlohmann::json& episode = r["episode"];  // checked as an episode record on restore
    if (!entry->agent || !episode.is_object() || entry->outcome) {
      return absl::DataLossError(
          source + ": sample " + std::to_string(entry->id) +
          ": an episode must be an object, on an agent sample without an outcome");
    }
    grpo.episodes[entry->id] = episode;
  }
  grpo.samples.push_back(*std::move(entry));
  return absl::OkStatus();
}

absl::Status ParseGrpo(const nlohmann::json& j, const std::string& source, JsonReader& read,
                       GrpoCursor& grpo) {
  nlohmann::json records;
  read.Get(j, "dispatcher", grpo.dispatcher, "grpo");
  read.Get(j, "records", records, "grpo");
  read.Get(j, "prefill_tokens", grpo.prefill_tokens, "grpo");
  read.Get(j, "decode_tokens", grpo.decode_tokens, "grpo");
  if (!read.ok()) return read.status();
  if (!records.is_array()) return absl::DataLossError(source + ": grpo.records is not an array");
  for (const nlohmann::json& r : records) {
    if (absl::Status s = ParseRecord(r, source, grpo); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainState> ParseState(const std::string& text, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::DataLossError(source + ": not a JSON object");
  JsonReader read(source, absl::StatusCode::kDataLoss);
  int format = 0;
  read.Get(j, "format_version", format);
  if (read.ok() && format != kFormatVersion) {
    return absl::FailedPreconditionError(source + ": format_version " + std::to_string(format) +
                                         ", this loom reads " + std::to_string(kFormatVersion));
  }
  TrainState state;
  read.Get(j, "stage_index", state.cursor.stage_index);
  read.Get(j, "stage", state.cursor.stage);
  read.Get(j, "step", state.cursor.step);
  read.Get(j, "policy_version", state.cursor.policy_version);
  read.Get(j, "config_version", state.cursor.config_version);
  if (j.contains("live")) state.cursor.live = j["live"];  // checked by LiveConfig::Restore
  if (j.contains("sft")) {
    state.sft.emplace();
    read.Get(j["sft"], "rng", state.sft->rng, "sft");
    read.Get(j["sft"], "next_index", state.sft->next_index, "sft");
  }
  if (!read.ok()) return read.status();
  if (j.contains("grpo")) {
    state.grpo.emplace();
    if (absl::Status s = ParseGrpo(j["grpo"], source, read, *state.grpo); !s.ok()) return s;
  }
  if (state.cursor.step < 0 || state.cursor.policy_version < 0 || state.cursor.stage_index < 0) {
    return absl::DataLossError(source + ": negative stage_index, step or policy_version");
  }
  return state;
}

absl::Status WriteModel(const model::Transformer& model, const std::string& tokenizer_json,
                        const std::string& dir) {
  if (absl::Status s = model.Save(dir + "/model"); !s.ok()) return s;
  std::error_code ec;
  fs::copy_file(tokenizer_json, dir + "/model/tokenizer.json", fs::copy_options::overwrite_existing,
                ec);
  if (ec) return absl::UnavailableError("cannot copy " + tokenizer_json + ": " + ec.message());
  return absl::OkStatus();
}

}  // namespace

size_t GrpoCursor::finished() const {
  size_t finished = 0;
  for (const SampleEntry& entry : samples) finished += entry.state.has_value();
  return finished;
}

absl::StatusOr<nlohmann::json> WriteTrainState(const TrainState& state,
                                               const model::Transformer& model,
                                               const std::string& tokenizer_json,
                                               const config::RunConfig& config,
                                               const std::string& dir) {
  if (absl::Status s = WriteModel(model, tokenizer_json, dir); !s.ok()) return s;
  if (absl::Status s = model::WriteSafetensors(dir + "/optimizer.safetensors", state.optimizer);
      !s.ok()) {
    return s;
  }
  const at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  if (absl::Status s = model::WriteSafetensors(dir + "/rng.safetensors", {{"torch_cpu", rng}});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteSamples(state, dir); !s.ok()) return s;
  if (absl::Status s = WriteFileAtomic(dir + "/state.json", StateJson(state).dump(1)); !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteFileAtomic(dir + "/config.yaml", config::ResolvedYaml(config));
      !s.ok()) {
    return s;
  }
  const size_t inflight = state.grpo ? state.grpo->inflight.size() : 0;
  const size_t finished = state.grpo ? state.grpo->finished() : 0;
  size_t episodes = 0;    // running
  size_t attachable = 0;  // of those, with turns on a leased session
  if (state.grpo) {
    for (const SampleEntry& entry : state.grpo->samples) {
      episodes += entry.agent && !entry.outcome;
    }
    for (const auto& [id, episode] : state.grpo->episodes) {
      attachable += !episode.value("turns", nlohmann::json()).empty();
    }
  }
  return nlohmann::json{{"stage", state.cursor.stage},
                        {"stage_index", state.cursor.stage_index},
                        {"stage_step", state.cursor.step},
                        {"policy_version", state.cursor.policy_version},
                        {"config_version", state.cursor.config_version},
                        {"format_version", kFormatVersion},
                        {"inflight_samples", inflight},
                        {"finished_samples", finished},
                        {"running_episodes", episodes},
                        {"attachable_episodes", attachable}};
}

namespace {

// dir/state.json and the samples beside it.
absl::StatusOr<TrainState> ReadStateAndSamples(const std::string& dir) {
  const std::string path = dir + "/state.json";
  auto text = ReadFile(path);
  if (!text.ok()) return absl::DataLossError(path + ": " + std::string(text.status().message()));
  auto state = ParseState(*text, path);
  if (!state.ok()) return state.status();
  if (absl::Status s = ReadSamples(dir, *state); !s.ok()) return s;
  return state;
}

}  // namespace

absl::StatusOr<TrainState> ReadTrainState(const std::string& dir) {
  auto state = ReadStateAndSamples(dir);
  if (!state.ok()) return state.status();
  auto optimizer = model::ReadSafetensors(dir + "/optimizer.safetensors");
  if (!optimizer.ok()) return absl::DataLossError(std::string(optimizer.status().message()));
  state->optimizer = *std::move(optimizer);
  return state;
}

absl::Status WriteRankState(const TrainState& state, const std::string& dir) {
  LOOM_CHECK(state.grpo.has_value(), "a rank's checkpoint share without a loop");
  if (absl::Status s = WriteSamples(state, dir); !s.ok()) return s;
  return WriteFileAtomic(dir + "/state.json", StateJson(state).dump(1));
}

absl::StatusOr<GrpoCursor> ReadRankState(const std::string& dir) {
  auto state = ReadStateAndSamples(dir);
  if (!state.ok()) return state.status();
  if (!state->grpo) return absl::DataLossError(dir + "/state.json: no loop state (`grpo`)");
  return *std::move(state->grpo);
}

absl::StatusOr<nlohmann::json> ReadDispatcherState(const std::string& dir) {
  const std::string path = dir + "/state.json";
  auto text = ReadFile(path);
  if (!text.ok()) return absl::DataLossError(path + ": " + std::string(text.status().message()));
  auto state = ParseState(*text, path);
  if (!state.ok()) return state.status();
  if (!state->grpo) return absl::DataLossError(path + ": no loop state (`grpo`)");
  return std::move(state->grpo->dispatcher);
}

absl::Status RestoreTorchRng(const std::string& dir) {
  auto tensors = model::ReadSafetensors(dir + "/rng.safetensors");
  if (!tensors.ok()) return absl::DataLossError(std::string(tensors.status().message()));
  auto it = tensors->find("torch_cpu");
  if (it == tensors->end() || it->second.scalar_type() != at::kByte) {
    return absl::DataLossError(dir + "/rng.safetensors: no uint8 tensor 'torch_cpu'");
  }
  try {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(it->second.clone());
  } catch (const c10::Error& e) {
    return absl::DataLossError(dir + "/rng.safetensors: " + e.what_without_backtrace());
  }
  return absl::OkStatus();
}

}  // namespace loom::train
