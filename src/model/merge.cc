#include "loom/model/merge.h"

#include <cmath>
#include <filesystem>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "loom/config/files.h"
#include "loom/model/safetensors.h"

namespace loom::model {
namespace fs = std::filesystem;
namespace {

// Keys of config.json that describe provenance, not architecture.
const char* const kIgnoredConfigKeys[] = {"_name_or_path", "transformers_version", "torch_dtype"};

// Files copied unchanged from the first input besides the weights.
const char* const kSideFiles[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                  "special_tokens_map.json", "generation_config.json"};

absl::StatusOr<nlohmann::json> ReadArchitecture(const std::string& dir) {
  const std::string path = dir + "/config.json";
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  nlohmann::json config = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(path + ": not a JSON object");
  }
  for (const char* key : kIgnoredConfigKeys) config.erase(key);
  return config;
}

absl::StatusOr<std::vector<double>> NormalisedWeights(const MergeOptions& options) {
  std::vector<double> weights = options.weights;
  if (weights.empty()) weights.assign(options.inputs.size(), 1.0);
  if (weights.size() != options.inputs.size()) {
    return absl::InvalidArgumentError("--weights: " + std::to_string(weights.size()) +
                                      " weights for " + std::to_string(options.inputs.size()) +
                                      " inputs");
  }
  double sum = 0;
  for (double w : weights) {
    if (!std::isfinite(w) || w < 0) {
      return absl::InvalidArgumentError("--weights: weights must be finite and >= 0");
    }
    sum += w;
  }
  if (sum <= 0) return absl::InvalidArgumentError("--weights: weights sum to 0");
  for (double& w : weights) w /= sum;
  return weights;
}

// Every way `other` (input `index`) differs from `first` in names, shapes and dtypes.
std::string DescribeMismatch(const TensorMap& first, const TensorMap& other,
                             const std::string& other_dir) {
  std::string problems;
  for (const auto& [name, tensor] : first) {
    auto it = other.find(name);
    if (it == other.end()) {
      problems += "\n  " + other_dir + " lacks " + name;
    } else if (!tensor.sizes().equals(it->second.sizes())) {
      problems += "\n  " + name + ": shape " + c10::str(tensor.sizes()) + " vs " +
                  c10::str(it->second.sizes()) + " in " + other_dir;
    } else if (tensor.scalar_type() != it->second.scalar_type()) {
      problems += "\n  " + name + ": dtype " + std::string(c10::toString(tensor.scalar_type())) +
                  " vs " + c10::toString(it->second.scalar_type()) + " in " + other_dir;
    }
  }
  for (const auto& [name, tensor] : other) {
    if (!first.count(name)) problems += "\n  " + other_dir + " has extra tensor " + name;
  }
  return problems;
}

}  // namespace

absl::Status MergeModels(const MergeOptions& options) {
  if (options.inputs.size() < 2) return absl::InvalidArgumentError("merge needs at least 2 inputs");
  if (options.output.empty()) return absl::InvalidArgumentError("--output is required");
  auto weights = NormalisedWeights(options);
  if (!weights.ok()) return weights.status();

  auto architecture = ReadArchitecture(options.inputs[0]);
  if (!architecture.ok()) return architecture.status();
  auto first = ReadModelTensors(options.inputs[0]);
  if (!first.ok()) return first.status();

  std::map<std::string, at::Tensor> sums;  // float64 accumulators
  for (const auto& [name, tensor] : *first) sums[name] = tensor.to(at::kDouble) * (*weights)[0];
  for (size_t i = 1; i < options.inputs.size(); ++i) {
    const std::string& dir = options.inputs[i];
    auto other_architecture = ReadArchitecture(dir);
    if (!other_architecture.ok()) return other_architecture.status();
    if (*other_architecture != *architecture) {
      return absl::InvalidArgumentError(
          "config.json of " + dir + " differs from " + options.inputs[0] + ": " +
          nlohmann::json::diff(*architecture, *other_architecture).dump());
    }
    auto tensors = ReadModelTensors(dir);
    if (!tensors.ok()) return tensors.status();
    if (std::string problems = DescribeMismatch(*first, *tensors, dir); !problems.empty()) {
      return absl::InvalidArgumentError("inputs do not have the same tensors:" + problems);
    }
    for (const auto& [name, tensor] : *tensors) {
      sums[name].add_(tensor.to(at::kDouble), (*weights)[i]);
    }
  }

  TensorMap merged;
  for (const auto& [name, sum] : sums) merged[name] = sum.to(first->at(name).scalar_type());
  std::error_code ec;
  fs::create_directories(options.output, ec);
  if (ec) return absl::UnavailableError("cannot create " + options.output + ": " + ec.message());
  if (absl::Status s = WriteSafetensors(options.output + "/model.safetensors", merged); !s.ok()) {
    return s;
  }
  for (const char* name : kSideFiles) {
    const std::string source = options.inputs[0] + "/" + name;
    if (!fs::exists(source)) continue;
    auto text = ReadFile(source);
    if (!text.ok()) return text.status();
    if (absl::Status s = WriteFileAtomic(options.output + "/" + name, *text); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace loom::model
