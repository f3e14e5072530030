// SampleState <-> JSON + safetensors.

#include "loom/rollout/state_io.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "loom/config/files.h"
#include "loom/config/json_reader.h"

namespace loom::rollout {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "loom.sample_state.v1";

// Copies a vector into a 1-D CPU tensor of `dtype`.
template <class T>
at::Tensor ToTensor(const std::vector<T>& values, at::ScalarType dtype) {
  at::Tensor out = at::empty({static_cast<int64_t>(values.size())}, dtype);
  if (!values.empty()) std::memcpy(out.data_ptr(), values.data(), values.size() * sizeof(T));
  return out;
}

// Copies tensor `name` (of `dtype`, 1-D with `length` elements unless
// length is -1, then any shape) into `out`.
template <class T>
absl::Status ReadArray(const model::TensorMap& tensors, const std::string& name,
                       at::ScalarType dtype, int64_t length, const std::string& source,
                       std::vector<T>& out) {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": tensor '", name, "' is missing"));
  }
  const at::Tensor& t = it->second;
  if (t.scalar_type() != dtype || (length >= 0 && (t.dim() != 1 || t.size(0) != length))) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": tensor '", name, "' has the wrong dtype or shape"));
  }
  at::Tensor c = t.contiguous();
  out.resize(c.numel());
  if (c.numel() > 0) std::memcpy(out.data(), c.data_ptr(), c.numel() * sizeof(T));
  return absl::OkStatus();
}

// Older files also hold "tags" (always empty); it is ignored.
void ReadScalars(JsonReader& r, const json& j, SampleState& s) {
  std::string format;
  r.Get(j, "format", format);
  if (r.ok() && format != kFormat) r.Fail("format", "is not " + std::string(kFormat));
  r.Get(j, "id", s.id);
  r.Get(j, "prompt_length", s.prompt_length);
  r.Get(j, "moe_layers", s.moe_layers);
  r.Get(j, "top_k", s.top_k);
  r.Get(j, "generated", s.generated);
  r.Get(j, "turn_start", s.turn_start);
  if (!r.ok()) return;
  const json& sampling = j.contains("sampling") ? j["sampling"] : json();
  r.Get(sampling, "temperature", s.sampling.temperature, "sampling");
  r.Get(sampling, "top_p", s.sampling.top_p, "sampling");
  r.Get(sampling, "top_k", s.sampling.top_k, "sampling");
  const json& stop = j.contains("stop") ? j["stop"] : json();
  r.Get(stop, "max_new_tokens", s.stop.max_new_tokens, "stop");
  r.Get(stop, "max_context", s.stop.max_context, "stop");
  r.Get(stop, "eos_token_ids", s.stop.eos_token_ids, "stop");
  r.Get(stop, "stop_sequences", s.stop.stop_sequences, "stop");
  r.Get(stop, "tool_call_end", s.stop.tool_call_end, "stop");
  if (stop.is_object() && stop.contains("max_turn_tokens")) {  // absent in older files
    r.Get(stop, "max_turn_tokens", s.stop.max_turn_tokens, "stop");
  }
  uint64_t key = 0, counter = 0;
  const json& rng = j.contains("rng") ? j["rng"] : json();
  r.Get(rng, "key", key, "rng");
  r.Get(rng, "counter", counter, "rng");
  s.rng = SampleRng::FromState(key, counter);
}

void ReadEnumsAndSegments(JsonReader& r, const json& j, SampleState& s, int64_t& kv_length) {
  std::string phase, finish;
  r.Get(j, "phase", phase);
  r.Get(j, "finish", finish);
  r.Get(j, "kv_length", kv_length);
  // Prefix sharing's provenance of the KV (absent before it existed).
  if (j.contains("kv_version")) r.Get(j, "kv_version", s.kv.version);
  if (j.contains("kv_published")) r.Get(j, "kv_published", s.kv.published);
  if (s.kv.version < model::KvSequence::kUnknownVersion) return r.Fail("kv_version", "below -1");
  if (s.kv.published < 0) return r.Fail("kv_published", "negative");
  std::vector<std::pair<int64_t, int64_t>> segments;
  r.Get(j, "segments", segments);
  if (!r.ok()) return;
  auto parsed_phase = ParseSamplePhase(phase);
  auto parsed_finish = ParseFinishReason(finish);
  if (!parsed_phase.ok()) return r.Fail("phase", std::string(parsed_phase.status().message()));
  if (!parsed_finish.ok()) return r.Fail("finish", std::string(parsed_finish.status().message()));
  s.phase = *parsed_phase;
  s.finish = *parsed_finish;
  for (const auto& [start, version] : segments) s.segments.push_back({start, version});
}

absl::Status ReadKv(const model::TensorMap& tensors, int64_t kv_length, const std::string& source,
                    SampleState& s) {
  if (kv_length < 0) return absl::OkStatus();  // no KV on host
  auto key = tensors.find("kv.key");
  auto value = tensors.find("kv.value");
  if (key == tensors.end() || value == tensors.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": tensors 'kv.key'/'kv.value' missing"));
  }
  if (key->second.dim() != 4 || key->second.sizes() != value->second.sizes() ||
      key->second.size(1) != kv_length ||
      key->second.scalar_type() != value->second.scalar_type()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": KV tensors disagree with each other or with kv_length"));
  }
  s.kv.key = key->second.clone();
  s.kv.value = value->second.clone();
  s.kv.length = kv_length;
  return absl::OkStatus();
}

}  // namespace

std::string SampleStateJson(const SampleState& s) {
  json segments = json::array();
  for (const Segment& seg : s.segments) segments.push_back({seg.start, seg.version});
  json j = {
      {"format", kFormat},
      {"id", s.id},
      {"prompt_length", s.prompt_length},
      {"moe_layers", s.moe_layers},
      {"top_k", s.top_k},
      {"generated", s.generated},
      {"turn_start", s.turn_start},
      {"sampling",
       {{"temperature", s.sampling.temperature},
        {"top_p", s.sampling.top_p},
        {"top_k", s.sampling.top_k}}},
      {"stop",
       {{"max_new_tokens", s.stop.max_new_tokens},
        {"max_context", s.stop.max_context},
        {"eos_token_ids", s.stop.eos_token_ids},
        {"stop_sequences", s.stop.stop_sequences},
        {"tool_call_end", s.stop.tool_call_end},
        {"max_turn_tokens", s.stop.max_turn_tokens}}},
      {"rng", {{"key", s.rng.key()}, {"counter", s.rng.counter()}}},
      {"phase", SamplePhaseName(s.phase)},
      {"finish", FinishReasonName(s.finish)},
      {"segments", segments},
      {"kv_length", s.kv.key.defined() ? s.kv.length : -1},
      {"kv_version", s.kv.version},
      {"kv_published", s.kv.published},
  };
  return j.dump(2) + "\n";
}

model::TensorMap SampleStateTensors(const SampleState& s) {
  model::TensorMap tensors;
  tensors["tokens"] = ToTensor(s.tokens, at::kLong);
  tensors["loss_mask"] = ToTensor(s.loss_mask, at::kByte);
  tensors["logprobs"] = ToTensor(s.logprobs, at::kFloat);
  tensors["versions"] = ToTensor(s.versions, at::kLong);
  if (s.routing_width() > 0 && !s.routing.empty()) {
    tensors["routing"] = ToTensor(s.routing, at::kShort).view({-1, s.moe_layers, s.top_k});
  }
  if (s.kv.key.defined()) {
    tensors["kv.key"] = s.kv.key;
    tensors["kv.value"] = s.kv.value;
  }
  return tensors;
}

absl::StatusOr<SampleState> SampleStateFromParts(const std::string& json_text,
                                                 const model::TensorMap& tensors,
                                                 const std::string& source) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  SampleState s;
  JsonReader reader(source);
  int64_t kv_length = -1;
  ReadScalars(reader, j, s);
  ReadEnumsAndSegments(reader, j, s, kv_length);
  if (auto status = reader.status(); !status.ok()) return status;
  if (s.moe_layers < 0 || s.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": negative routing shape"));
  }
  absl::Status status;
  if (!tensors.count("tokens") || tensors.at("tokens").dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": tensor 'tokens' missing or not 1-D"));
  }
  const int64_t t = tensors.at("tokens").size(0);
  status = ReadArray(tensors, "tokens", at::kLong, t, source, s.tokens);
  if (status.ok()) status = ReadArray(tensors, "loss_mask", at::kByte, t, source, s.loss_mask);
  if (status.ok()) status = ReadArray(tensors, "logprobs", at::kFloat, t, source, s.logprobs);
  if (status.ok()) status = ReadArray(tensors, "versions", at::kLong, t, source, s.versions);
  if (status.ok() && tensors.count("routing")) {
    const at::Tensor& r = tensors.at("routing");
    if (r.scalar_type() != at::kShort || r.dim() != 3 || r.size(1) != s.moe_layers ||
        r.size(2) != s.top_k) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": tensor 'routing' has the wrong dtype or shape"));
    }
    status = ReadArray(tensors, "routing", at::kShort, -1, source, s.routing);
  }
  if (status.ok()) status = ReadKv(tensors, kv_length, source, s);
  if (!status.ok()) return status;
  return s;
}

absl::Status WriteSampleState(const SampleState& state, const std::string& prefix) {
  if (auto status = model::WriteSafetensors(prefix + ".safetensors", SampleStateTensors(state));
      !status.ok()) {
    return status;
  }
  return WriteFileAtomic(prefix + ".json", SampleStateJson(state));
}

absl::StatusOr<SampleState> ReadSampleState(const std::string& prefix) {
  auto text = ReadFile(prefix + ".json");
  if (!text.ok()) return text.status();
  auto tensors = model::ReadSafetensors(prefix + ".safetensors");
  if (!tensors.ok()) return tensors.status();
  return SampleStateFromParts(*text, *tensors, prefix + ".{json,safetensors}");
}

}  // namespace loom::rollout
