// `loom version`: loom's version, the LibTorch it runs on, and whether CUDA is usable.

#include <torch/cuda.h>
#include <torch/version.h>

#include <cstdio>

#include "cli/command.h"

namespace loom::cli {
namespace {

void SetupVersion(CLI::App& app, Context& context) {
  CLI::App* cmd = app.add_subcommand("version", "Print loom's, LibTorch's and CUDA's versions");
  cmd->callback([&context] {
    std::printf("loom %s\n", LOOM_VERSION);
    std::printf("libtorch %s\n", TORCH_VERSION);
    const bool cuda = torch::cuda::is_available();
    if (cuda) {
      std::printf("cuda: available (%d device(s))\n", static_cast<int>(torch::cuda::device_count()));
    } else {
      std::printf("cuda: not available\n");
    }
    context.exit_code = kExitOk;
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("version", SetupVersion);

}  // namespace loom::cli
