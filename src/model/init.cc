// InitModelDir: a fresh, complete model directory.

#include "loom/model/init.h"

#include "absl/strings/str_cat.h"
#include "loom/config/files.h"
#include "loom/model/transformer.h"
#include "loom/tokenizer/tiny.h"

namespace loom::model {

absl::Status InitModelDir(const InitModelOptions& options) {
  auto config = DefaultModelConfig(options.arch);
  if (!config.ok()) return config.status();
  std::string tokenizer_json = tokenizer::TinyTokenizerJson(options.tokenizer);
  int64_t vocab = tokenizer::TinyTokenizerVocabSize(options.tokenizer);
  if (!options.tokenizer_file.empty()) {
    auto text = ReadFile(options.tokenizer_file);
    if (!text.ok()) return text.status();
    auto with_specials = tokenizer::WithChatSpecials(*text, &vocab);
    if (!with_specials.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.tokenizer_file, ": ", with_specials.status().message()));
    }
    tokenizer_json = *std::move(with_specials);
  }
  config->vocab_size = vocab;
  for (const std::string& assignment : options.overrides) {
    if (auto status = ApplyConfigOverride(*config, assignment); !status.ok()) return status;
  }
  auto dtype = ParseDtype(options.dtype);
  if (!dtype.ok()) return dtype.status();
  if (config->vocab_size < vocab) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", config->vocab_size,
                                                   " is smaller than the tokenizer's ", vocab));
  }
  LoadOptions load;
  load.dtype = *dtype;
  auto model = Transformer::RandomInit(*config, options.seed, load);
  if (auto status = model->Save(options.out_dir); !status.ok()) return status;
  return WriteFileAtomic(options.out_dir + "/tokenizer.json", tokenizer_json);
}

}  // namespace loom::model
