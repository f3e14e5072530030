#pragma once
// The model a command evaluates (`loom eval`, `loom tasks calibrate`): its
// weights on the CPU in the config's dtype, with its tokenizer and special
// tokens.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "loom/chat/special_tokens.h"
#include "loom/config/run_config.h"
#include "loom/model/transformer.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::cli {

struct EvalModel {
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  chat::SpecialTokenIds special;
};

// Loads the model directory `dir` (config.json, weights, tokenizer.json).
absl::StatusOr<EvalModel> LoadEvalModel(const std::string& dir, const config::RunConfig& config);

}  // namespace loom::cli
