// `loom merge --inputs DIR... [--weights w...] --output DIR`: weighted model average.

#include <iostream>
#include <memory>

#include "cli/command.h"
#include "loom/model/merge.h"

namespace loom::cli {
namespace {

void SetupMerge(CLI::App& app, Context& context) {
  auto options = std::make_shared<model::MergeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "merge", "Average same-architecture checkpoints (weighted) into a new model directory");
  cmd->add_option("--inputs", options->inputs, "Model directories (Hugging Face layout)")
      ->required()
      ->expected(2, -1);
  cmd->add_option("--weights", options->weights,
                  "One weight per input (normalised; default equal)");
  cmd->add_option("--output", options->output, "Output model directory")->required();
  cmd->callback([options, &context] {
    absl::Status status = model::MergeModels(*options);
    if (!status.ok()) {
      std::cerr << "merge: " << status.message() << "\n";
      context.exit_code = StatusExitCode(status);
      return;
    }
    std::cout << "merged " << options->inputs.size() << " models into " << options->output << "\n";
    context.exit_code = kExitOk;
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("merge", SetupMerge);

}  // namespace loom::cli
