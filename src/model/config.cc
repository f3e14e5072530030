// config.json <-> ModelConfig.

#include "loom/model/config.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "loom/config/files.h"
#include "loom/config/json_reader.h"

namespace loom::model {
namespace {

using nlohmann::json;

const std::set<std::string>& KnownArchs() {
  static const std::set<std::string> archs = {"llama", "qwen2", "qwen3", "qwen3_moe"};
  return archs;
}

// Keys read into named fields (everything else goes to `extra`).
const std::set<std::string>& InterpretedKeys() {
  static const std::set<std::string> keys = {"model_type",
                                             "vocab_size",
                                             "hidden_size",
                                             "intermediate_size",
                                             "num_hidden_layers",
                                             "num_attention_heads",
                                             "num_key_value_heads",
                                             "head_dim",
                                             "rms_norm_eps",
                                             "rope_theta",
                                             "max_position_embeddings",
                                             "tie_word_embeddings",
                                             "attention_bias",
                                             "torch_dtype",
                                             "num_experts",
                                             "num_experts_per_tok",
                                             "moe_intermediate_size",
                                             "norm_topk_prob",
                                             "decoder_sparse_step",
                                             "mlp_only_layers",
                                             "hidden_act",
                                             "rope_scaling",
                                             "mlp_bias",
                                             "use_sliding_window",
                                             "attention_dropout",
                                             "pretraining_tp",
                                             "shared_expert_intermediate_size"};
  return keys;
}

// Computation-changing keys loom does not implement: error unless benign.
void CheckUnsupported(const json& j, JsonReader& r) {
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (has("hidden_act") && j["hidden_act"] != "silu") {
    r.Error(absl::StrCat("hidden_act ", j["hidden_act"].dump(), " is not supported (only silu)"));
  }
  if (has("rope_scaling")) {
    const json& s = j["rope_scaling"];
    std::string type = s.value("rope_type", s.value("type", std::string("?")));
    if (type != "default") {
      r.Error(absl::StrCat("rope_scaling type '", type, "' is not supported"));
    }
  }
  if (has("mlp_bias") && j["mlp_bias"] == true) r.Error("mlp_bias=true is not supported");
  if (has("use_sliding_window") && j["use_sliding_window"] == true) {
    r.Error("use_sliding_window=true is not supported");
  }
  if (has("pretraining_tp") && j["pretraining_tp"] != 1) {
    r.Error("pretraining_tp other than 1 is not supported");
  }
  if (has("shared_expert_intermediate_size") && j["shared_expert_intermediate_size"] != 0) {
    r.Error("shared experts (shared_expert_intermediate_size) are not supported");
  }
}

void Validate(const ModelConfig& c, JsonReader& r) {
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) r.Error(absl::StrCat(key, " must be > 0, got ", v));
  };
  positive("vocab_size", c.vocab_size);
  positive("hidden_size", c.hidden_size);
  positive("num_hidden_layers", c.num_hidden_layers);
  positive("num_attention_heads", c.num_attention_heads);
  positive("num_key_value_heads", c.num_key_value_heads);
  positive("head_dim", c.head_dim);
  positive("max_position_embeddings", c.max_position_embeddings);
  if (c.head_dim % 2 != 0) r.Error(absl::StrCat("head_dim must be even, got ", c.head_dim));
  if (c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads != 0) {
    r.Error(absl::StrCat("num_attention_heads (", c.num_attention_heads,
                         ") must be a multiple of num_key_value_heads (", c.num_key_value_heads,
                         ")"));
  }
  if (!(c.rms_norm_eps > 0)) r.Error("rms_norm_eps must be > 0");
  if (!(c.rope_theta > 0)) r.Error("rope_theta must be > 0");
  if (c.torch_dtype != "float32" && c.torch_dtype != "bfloat16" && c.torch_dtype != "float16") {
    r.Error(absl::StrCat("torch_dtype '", c.torch_dtype, "' is not supported"));
  }
  if (c.arch == "qwen3_moe") {
    positive("num_experts", c.num_experts);
    positive("num_experts_per_tok", c.num_experts_per_tok);
    positive("moe_intermediate_size", c.moe_intermediate_size);
    positive("decoder_sparse_step", c.decoder_sparse_step);
    if (c.num_experts_per_tok > c.num_experts) {
      r.Error("num_experts_per_tok must not exceed num_experts");
    }
    if (c.num_experts > 32767) r.Error("num_experts must be <= 32767");
  }
  bool any_dense = false;
  for (int64_t i = 0; i < c.num_hidden_layers && i < 100000; ++i) any_dense |= !c.IsMoeLayer(i);
  if (any_dense) positive("intermediate_size", c.intermediate_size);
}

absl::Status Finish(const JsonReader& r) {
  if (r.errors().empty()) return absl::OkStatus();
  std::string message;
  for (const auto& e : r.errors()) absl::StrAppend(&message, message.empty() ? "" : "\n", e);
  return absl::InvalidArgumentError(message);
}

ModelConfig ArchDefaults(const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  if (arch == "qwen2" || arch == "qwen3" || arch == "qwen3_moe") c.rope_theta = 1000000.0;
  if (arch == "llama") c.rms_norm_eps = 1e-6;
  return c;
}

}  // namespace

bool ModelConfig::IsMoeLayer(int64_t layer) const {
  if (arch != "qwen3_moe" || num_experts <= 0 || decoder_sparse_step <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) {
    return false;
  }
  return (layer + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::NumMoeLayers() const {
  int64_t n = 0;
  for (int64_t i = 0; i < num_hidden_layers; ++i) n += IsMoeLayer(i);
  return n;
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& source) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  JsonReader r(source);
  std::string arch;
  r.GetOptional(j, "model_type", arch);
  if (!KnownArchs().count(arch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": model_type '", arch, "' is not supported (llama, qwen2, qwen3, qwen3_moe)"));
  }
  ModelConfig c = ArchDefaults(arch);
  r.GetOptional(j, "vocab_size", c.vocab_size);
  r.GetOptional(j, "hidden_size", c.hidden_size);
  r.GetOptional(j, "intermediate_size", c.intermediate_size);
  r.GetOptional(j, "num_hidden_layers", c.num_hidden_layers);
  r.GetOptional(j, "num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = c.num_attention_heads;
  r.GetOptional(j, "num_key_value_heads", c.num_key_value_heads);
  if (c.num_attention_heads > 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  r.GetOptional(j, "head_dim", c.head_dim);
  r.GetOptional(j, "rms_norm_eps", c.rms_norm_eps);
  r.GetOptional(j, "rope_theta", c.rope_theta);
  r.GetOptional(j, "max_position_embeddings", c.max_position_embeddings);
  r.GetOptional(j, "tie_word_embeddings", c.tie_word_embeddings);
  r.GetOptional(j, "attention_bias", c.attention_bias);
  r.GetOptional(j, "torch_dtype", c.torch_dtype);
  if (arch == "qwen3_moe") {
    r.GetOptional(j, "num_experts", c.num_experts);
    r.GetOptional(j, "num_experts_per_tok", c.num_experts_per_tok);
    r.GetOptional(j, "moe_intermediate_size", c.moe_intermediate_size);
    r.GetOptional(j, "norm_topk_prob", c.norm_topk_prob);
    r.GetOptional(j, "decoder_sparse_step", c.decoder_sparse_step);
    r.GetOptional(j, "mlp_only_layers", c.mlp_only_layers);
  }
  CheckUnsupported(j, r);
  for (const auto& [key, value] : j.items()) {
    if (!InterpretedKeys().count(key)) c.extra.emplace_back(key, value.dump());
  }
  if (r.errors().empty()) Validate(c, r);
  if (auto status = Finish(r); !status.ok()) return status;
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  std::string path = dir + "/config.json";
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseModelConfig(*text, path);
}

std::string ModelConfigToJson(const ModelConfig& c) {
  json j = json::object();
  for (const auto& [key, value] : c.extra) j[key] = json::parse(value, nullptr, false);
  if (!j.contains("architectures")) {
    static const std::map<std::string, std::string> names = {{"llama", "LlamaForCausalLM"},
                                                             {"qwen2", "Qwen2ForCausalLM"},
                                                             {"qwen3", "Qwen3ForCausalLM"},
                                                             {"qwen3_moe", "Qwen3MoeForCausalLM"}};
    j["architectures"] = {names.at(c.arch)};
  }
  j["model_type"] = c.arch;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = c.torch_dtype;
  if (c.arch == "qwen3_moe") {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
  }
  return j.dump(2) + "\n";
}

absl::StatusOr<ModelConfig> DefaultModelConfig(const std::string& arch) {
  if (!KnownArchs().count(arch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown arch '", arch, "' (llama, qwen2, qwen3, qwen3_moe)"));
  }
  ModelConfig c = ArchDefaults(arch);
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 4096;
  c.tie_word_embeddings = false;
  if (arch == "qwen3_moe") {
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 32;
    c.norm_topk_prob = true;
  }
  return c;
}

ModelConfig SpeedBenchmarkConfig() {
  ModelConfig c = *DefaultModelConfig("llama");
  c.vocab_size = 512;
  c.hidden_size = 512;
  c.intermediate_size = 1408;
  c.num_hidden_layers = 6;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  return c;
}

absl::Status ApplyConfigOverride(ModelConfig& config, const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("override '", assignment, "' is not of the form key=value"));
  }
  std::string key = assignment.substr(0, eq);
  std::string text = assignment.substr(eq + 1);
  json value = json::parse(text, nullptr, false);
  if (value.is_discarded()) value = text;
  json j = json::parse(ModelConfigToJson(config));
  if (key == "model_type" && value != config.arch) {
    return absl::InvalidArgumentError("override model_type: use --arch to choose the arch");
  }
  j[key] = value;
  auto parsed = ParseModelConfig(j.dump(), absl::StrCat("override ", key));
  if (!parsed.ok()) return parsed.status();
  config = *parsed;
  return absl::OkStatus();
}

}  // namespace loom::model
