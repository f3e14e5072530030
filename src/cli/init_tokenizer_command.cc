// `loom init-tokenizer --out FILE`: writes the tiny models' tokenizer.json
// (256 byte tokens + the DeepSeek-V4 special strings; see tokenizer/tiny.h).

#include <iostream>
#include <memory>

#include "cli/command.h"
#include "loom/config/files.h"
#include "loom/tokenizer/tiny.h"

namespace loom::cli {
namespace {

void SetupInitTokenizer(CLI::App& app, Context& context) {
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "init-tokenizer", "Write the tiny byte-level tokenizer.json (256 bytes + DSV4 specials)");
  cmd->add_option("--out", *out, "Path of the tokenizer.json to write")->required();
  cmd->callback([out, &context] {
    absl::Status status = WriteFileAtomic(*out, tokenizer::TinyTokenizerJson());
    if (!status.ok()) {
      std::cerr << "init-tokenizer: " << status.message() << "\n";
      context.exit_code = kExitFailure;
      return;
    }
    std::cout << "wrote " << *out << " (vocab size " << tokenizer::TinyTokenizerVocabSize()
              << ")\n";
    context.exit_code = kExitOk;
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("init-tokenizer", SetupInitTokenizer);

}  // namespace loom::cli
