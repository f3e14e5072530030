// TrainState on disk: state.json (cursors, dispatcher, sample records),
// optimizer and RNG tensors, the model and config. The samples' own files are
// in train_state_samples.cc.

#include "loom/train/train_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <mutex>

#include "loom/config/check.h"
#include "loom/config/files.h"
#include "train/train_state_internal.h"

namespace loom::train {
namespace fs = std::filesystem;
namespace {

constexpr int kFormatVersion = 1;

nlohmann::json RecordJson(const SampleRecord& r) {
  nlohmann::json j = {{"id", r.id},
                      {"dataset", r.dataset},
                      {"problem_index", r.problem_index},
                      {"subgroup_id", r.subgroup_id},
                      {"effort", r.effort},
                      {"config_version", r.config_version},
                      {"teacher", r.teacher}};
  if (r.agent) j["agent"] = true;
  if (!r.trajectory.is_null()) j["trajectory"] = r.trajectory;
  if (!r.episode.is_null()) j["episode"] = r.episode;
  return j;
}

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
    for (const SampleRecord& r : state.grpo->records) records.push_back(RecordJson(r));
    j["grpo"] = {{"dispatcher", state.grpo->dispatcher},
                 {"records", records},
                 {"prefill_tokens", state.grpo->prefill_tokens},
                 {"decode_tokens", state.grpo->decode_tokens}};
  }
  return j;
}

// Typed field access that turns every mismatch into one DATA_LOSS naming the field.
class Fields {
 public:
  explicit Fields(std::string source) : source_(std::move(source)) {}

  template <class T>
  void Get(const nlohmann::json& j, const char* key, T& out) {
    if (!status_.ok()) return;
    if (!j.is_object() || !j.contains(key)) {
      status_ = absl::DataLossError(source_ + ": missing field '" + key + "'");
      return;
    }
    try {
      out = j.at(key).get<T>();
    } catch (const nlohmann::json::exception&) {
      status_ = absl::DataLossError(source_ + ": field '" + key + "' has the wrong type");
    }
  }
  const absl::Status& status() const { return status_; }

 private:
  std::string source_;
  absl::Status status_;
};

absl::Status ParseGrpo(const nlohmann::json& j, Fields& f, GrpoCursor& grpo) {
  nlohmann::json records;
  f.Get(j, "dispatcher", grpo.dispatcher);
  f.Get(j, "records", records);
  f.Get(j, "prefill_tokens", grpo.prefill_tokens);
  f.Get(j, "decode_tokens", grpo.decode_tokens);
  if (f.status().ok() && !records.is_array()) {
    return absl::DataLossError("state.json: grpo.records is not an array");
  }
  for (const auto& r : records) {
    SampleRecord rec;
    f.Get(r, "id", rec.id);
    f.Get(r, "dataset", rec.dataset);
    f.Get(r, "problem_index", rec.problem_index);
    f.Get(r, "subgroup_id", rec.subgroup_id);
    f.Get(r, "effort", rec.effort);
    // Checkpoints written before live config versions existed have none: 0.
    if (r.is_object() && r.contains("config_version"))
      f.Get(r, "config_version", rec.config_version);
    if (r.is_object() && r.contains("teacher")) f.Get(r, "teacher", rec.teacher);
    if (r.is_object() && r.contains("agent")) f.Get(r, "agent", rec.agent);
    if (r.is_object() && r.contains("trajectory")) {
      rec.trajectory = r["trajectory"];  // checked against the proto on restore
      if (!rec.agent || !rec.trajectory.is_object()) {
        return absl::DataLossError("state.json: sample " + std::to_string(rec.id) +
                                   ": a trajectory must be an object, on an agent sample");
      }
    }
    if (r.is_object() && r.contains("episode")) {
      rec.episode = r["episode"];  // checked as an episode record on restore
      if (!rec.agent || !rec.episode.is_object() || !rec.trajectory.is_null()) {
        return absl::DataLossError(
            "state.json: sample " + std::to_string(rec.id) +
            ": an episode must be an object, on an agent sample without a trajectory");
      }
    }
    grpo.records.push_back(rec);
  }
  return f.status();
}

absl::StatusOr<TrainState> ParseState(const std::string& text, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::DataLossError(source + ": not a JSON object");
  Fields f(source);
  int format = 0;
  f.Get(j, "format_version", format);
  if (f.status().ok() && format != kFormatVersion) {
    return absl::FailedPreconditionError(source + ": format_version " + std::to_string(format) +
                                         ", this loom reads " + std::to_string(kFormatVersion));
  }
  TrainState state;
  f.Get(j, "stage_index", state.cursor.stage_index);
  f.Get(j, "stage", state.cursor.stage);
  f.Get(j, "step", state.cursor.step);
  f.Get(j, "policy_version", state.cursor.policy_version);
  f.Get(j, "config_version", state.cursor.config_version);
  if (j.contains("live")) state.cursor.live = j["live"];  // checked by LiveConfig::Restore
  if (j.contains("sft")) {
    state.sft.emplace();
    f.Get(j["sft"], "rng", state.sft->rng);
    f.Get(j["sft"], "next_index", state.sft->next_index);
  }
  if (j.contains("grpo")) {
    state.grpo.emplace();
    if (absl::Status s = ParseGrpo(j["grpo"], f, *state.grpo); !s.ok()) return s;
  }
  if (!f.status().ok()) return f.status();
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
  const size_t finished = state.grpo ? state.grpo->finished.size() : 0;
  size_t episodes = 0;    // running
  size_t attachable = 0;  // of those, with turns on a leased session
  if (state.grpo) {
    for (const SampleRecord& r : state.grpo->records) {
      episodes += r.agent && r.trajectory.is_null();
      attachable += r.episode.is_object() && !r.episode.value("turns", nlohmann::json()).empty();
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
