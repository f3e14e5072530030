// `loom bench serve [--tokenizer FILE] [--prompt-tokens T] [--calls N]
// [--repeats R]`: the model endpoint's per-call cost on a growing
// Claude-Code-shaped conversation, against re-rendering and re-tokenising the
// whole history. JSON on the last line.

#include <memory>

#include "cli/bench_json.h"
#include "loom/bench/serve_bench.h"

namespace loom::cli {
namespace {

void SetupBenchServe(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto options = std::make_shared<bench::ServeBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "serve", "The endpoint's per-call cost on a growing agent conversation vs re-rendering it");
  cmd->add_option("--tokenizer", options->tokenizer,
                  "A Hugging Face tokenizer.json (default: DeepSeek-V3's from scripts/setup.sh)");
  cmd->add_option("--prompt-tokens", options->prompt_tokens,
                  "The conversation's tokens before the first call")
      ->check(CLI::Range(100, 1000000));
  cmd->add_option("--calls", options->calls, "Calls timed, one new turn each")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--repeats", options->repeats, "Times the whole sequence runs")
      ->check(CLI::Range(1, 100));
  cmd->callback([options, &context] {
    context.exit_code = RunJsonBench("serve", 0, [&] { return bench::RunServeBench(*options); });
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench_serve", SetupBenchServe);

}  // namespace loom::cli
