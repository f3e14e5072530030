// Transformer construction, parameters, load and save.

#include <ATen/core/grad_mode.h>
#include <sys/stat.h>

#include <set>

#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/config/files.h"
#include "loom/model/transformer.h"
#include "weights.h"

namespace loom::model {
namespace {

std::string DtypeName(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? "bfloat16" : "float32";
}

absl::Status MakeDirs(const std::string& dir) {
  std::string partial;
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat(partial, ": cannot create directory"));
    }
  }
  return absl::OkStatus();
}

// Every problem of `tensors` against `slots`, one per line ("" = none).
std::string CheckTensors(const std::vector<ParamSlot>& slots, const TensorMap& tensors, bool tied) {
  std::vector<std::string> missing, unexpected, misshapen;
  std::set<std::string> expected;
  for (const ParamSlot& slot : slots) {
    expected.insert(slot.name);
    auto it = tensors.find(slot.name);
    if (it == tensors.end()) {
      missing.push_back(slot.name);
    } else if (it->second.sizes().vec() != slot.shape) {
      misshapen.push_back(absl::StrCat(slot.name, " is [", absl::StrJoin(it->second.sizes(), ", "),
                                       "], expected [", absl::StrJoin(slot.shape, ", "), "]"));
    } else if (!at::isFloatingType(it->second.scalar_type())) {
      misshapen.push_back(absl::StrCat(slot.name, " is not a floating-point tensor"));
    }
  }
  for (const auto& [name, tensor] : tensors) {
    if (expected.count(name) || IsIgnoredTensorName(name)) continue;
    if (tied && name == "lm_head.weight") continue;  // some tied checkpoints store it anyway
    unexpected.push_back(name);
  }
  std::string message;
  if (!missing.empty())
    absl::StrAppend(&message, "missing tensors: ", absl::StrJoin(missing, ", "), "\n");
  if (!unexpected.empty()) {
    absl::StrAppend(&message, "unexpected tensors: ", absl::StrJoin(unexpected, ", "), "\n");
  }
  if (!misshapen.empty()) {
    absl::StrAppend(&message, "misshapen tensors: ", absl::StrJoin(misshapen, "; "), "\n");
  }
  return message;
}

}  // namespace

absl::StatusOr<at::ScalarType> ParseDtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype '", name, "' is not supported (float32, bfloat16)"));
}

Transformer::Transformer(ModelConfig config, LoadOptions options)
    : config_(std::move(config)), options_(options), weights_(std::make_unique<ModelWeights>()) {
  config_.torch_dtype = DtypeName(options_.dtype);
}

Transformer::~Transformer() = default;

std::unique_ptr<Transformer> Transformer::RandomInit(const ModelConfig& config, uint64_t seed,
                                                     const LoadOptions& options) {
  std::unique_ptr<Transformer> model(new Transformer(config, options));
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto target = at::TensorOptions().dtype(options.dtype).device(options.device);
  for (const ParamSlot& slot : ParamSlots(model->config_, *model->weights_)) {
    at::Tensor t = at::empty(slot.shape, at::kFloat);
    if (slot.init == InitKind::kNormal) t.normal_(0.0, 0.02, gen);
    if (slot.init == InitKind::kOnes) t.fill_(1.0);
    if (slot.init == InitKind::kZeros) t.zero_();
    *slot.tensor = t.to(target).set_requires_grad(options.requires_grad);
  }
  ModelWeights& w = *model->weights_;
  FuseProjections(w);
  if (config.tie_word_embeddings) w.lm_head = w.embed;
  return model;
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::FromTensors(const ModelConfig& config,
                                                                      const TensorMap& tensors,
                                                                      const LoadOptions& options) {
  std::unique_ptr<Transformer> model(new Transformer(config, options));
  auto slots = ParamSlots(model->config_, *model->weights_);
  if (std::string problems = CheckTensors(slots, tensors, config.tie_word_embeddings);
      !problems.empty()) {
    problems.pop_back();
    return absl::InvalidArgumentError(problems);
  }
  try {
    auto target = at::TensorOptions().dtype(options.dtype).device(options.device);
    for (const ParamSlot& slot : slots) {
      at::Tensor t = tensors.at(slot.name).to(target, /*non_blocking=*/false, /*copy=*/true);
      *slot.tensor = t.contiguous().set_requires_grad(options.requires_grad);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("loading tensors: ", e.what_without_backtrace()));
  }
  ModelWeights& w = *model->weights_;
  FuseProjections(w);
  if (config.tie_word_embeddings) w.lm_head = w.embed;
  return model;
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(const std::string& dir,
                                                               const LoadOptions& options) {
  auto config = LoadModelConfig(dir);
  if (!config.ok()) return config.status();
  auto tensors = ReadModelTensors(dir);
  if (!tensors.ok()) return tensors.status();
  auto model = FromTensors(*config, *tensors, options);
  if (!model.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": ", model.status().message()));
  }
  return model;
}

absl::Status Transformer::Save(const std::string& dir, int64_t max_shard_bytes) const {
  if (auto status = MakeDirs(dir); !status.ok()) return status;
  if (auto status = WriteModelTensors(dir, StateDict(), max_shard_bytes); !status.ok()) {
    return status;
  }
  return WriteFileAtomic(dir + "/config.json", ModelConfigToJson(config_));
}

std::vector<std::pair<std::string, at::Tensor>> Transformer::NamedParameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const ParamSlot& slot : ParamSlots(config_, *weights_)) {
    out.emplace_back(slot.name, *slot.tensor);
  }
  return out;
}

std::vector<at::Tensor> Transformer::Parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [name, tensor] : NamedParameters()) out.push_back(tensor);
  return out;
}

TensorMap Transformer::StateDict() const {
  TensorMap out;
  for (auto& [name, tensor] : NamedParameters()) out.emplace(name, tensor.detach());
  return out;
}

absl::Status Transformer::LoadStateDict(const TensorMap& tensors) {
  auto slots = ParamSlots(config_, *weights_);
  if (std::string problems = CheckTensors(slots, tensors, config_.tie_word_embeddings);
      !problems.empty()) {
    problems.pop_back();
    return absl::InvalidArgumentError(problems);
  }
  at::NoGradGuard no_grad;
  for (const ParamSlot& slot : slots) slot.tensor->copy_(tensors.at(slot.name));
  return absl::OkStatus();
}

void Transformer::SetRequiresGrad(bool requires_grad) {
  for (const ParamSlot& slot : ParamSlots(config_, *weights_)) {
    slot.tensor->set_requires_grad(requires_grad);
  }
  options_.requires_grad = requires_grad;
}

int64_t Transformer::NumParameters() const {
  int64_t n = 0;
  for (auto& [name, tensor] : NamedParameters()) n += tensor.numel();
  return n;
}

int64_t Transformer::ParameterCount(const ModelConfig& config) {
  ModelWeights shapes_only;
  int64_t n = 0;
  for (const ParamSlot& slot : ParamSlots(config, shapes_only)) {
    int64_t numel = 1;
    for (int64_t d : slot.shape) numel *= d;
    n += numel;
  }
  return n;
}

int64_t Transformer::ParameterBytes() const {
  int64_t bytes = 0;
  for (auto& [name, tensor] : NamedParameters()) bytes += tensor.numel() * tensor.element_size();
  return bytes;
}

const at::Tensor& Transformer::LmHead() const { return weights_->lm_head; }

KvPoolOptions Transformer::PoolOptions(int64_t max_tokens, int64_t block_size) const {
  return KvPoolOptionsFor(config_, max_tokens, block_size, options_.dtype, options_.device);
}

}  // namespace loom::model
