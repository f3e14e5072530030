#include "cli/eval_model.h"

namespace loom::cli {

absl::StatusOr<EvalModel> LoadEvalModel(const std::string& dir, const config::RunConfig& config) {
  auto dtype = model::ParseDtype(config.model.dtype);
  if (!dtype.ok()) return dtype.status();
  auto model = model::Transformer::Load(dir, {*dtype, at::kCPU, false});
  if (!model.ok()) return model.status();
  auto tokenizer = tokenizer::Tokenizer::FromFile(dir + "/tokenizer.json");
  if (!tokenizer.ok()) return tokenizer.status();
  auto special = chat::SpecialTokenIds::Resolve(**tokenizer);
  if (!special.ok()) return special.status();
  return EvalModel{*std::move(model), *std::move(tokenizer), *special};
}

}  // namespace loom::cli
