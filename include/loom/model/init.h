#pragma once
// Creating a fresh model directory, as `loom init-model` does: config.json
// (small defaults for the arch, overridden by `overrides`), model.safetensors
// (seeded random init) and tokenizer.json (the tiny tokenizer).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "loom/tokenizer/tiny.h"

namespace loom::model {

struct InitModelOptions {
  std::string arch = "llama";          // llama | qwen2 | qwen3 | qwen3_moe
  std::string out_dir;                 // created if missing
  std::vector<std::string> overrides;  // "config_key=value", any config.json key
  uint64_t seed = 0;
  std::string dtype = "float32";              // parameter dtype written
  tokenizer::TinyTokenizerOptions tokenizer;  // which tiny tokenizer tokenizer.json holds
  // Instead, a Hugging Face tokenizer.json to use, with the chat format's
  // special tokens it lacks added (tokenizer::WithChatSpecials).
  std::string tokenizer_file;
};

// INVALID_ARGUMENT for a bad arch or override (naming it); the directory is
// written only when everything is valid.
absl::Status InitModelDir(const InitModelOptions& options);

}  // namespace loom::model
