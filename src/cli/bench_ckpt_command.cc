// `loom bench ckpt [--quick] [--samples N] [--prompt-tokens T]`: checkpoint
// save / verify / load times with in-flight samples, and KV restore vs
// re-prefill on resume. JSON on the last line.

#include <memory>

#include "cli/bench_json.h"
#include "loom/bench/ckpt_bench.h"

namespace loom::cli {
namespace {

struct CkptCommandOptions {
  int threads = 0;
  bench::CkptBenchOptions bench_options;
};

void SetupBenchCkpt(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto options = std::make_shared<CkptCommandOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "ckpt", "Checkpoint cost with in-flight samples; KV restore vs re-prefill on resume");
  cmd->add_flag("--quick", options->bench_options.quick, "A small model (ends within seconds)");
  cmd->add_option("--samples", options->bench_options.samples, "In-flight samples")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--prompt-tokens", options->bench_options.prompt_tokens, "Tokens per sample")
      ->check(CLI::Range(1, 3000));
  cmd->add_option("--threads", options->threads, "Intra-op threads (default: LibTorch's)");
  cmd->callback([options, &context] {
    context.exit_code = RunJsonBench("ckpt", options->threads,
                                     [&] { return bench::RunCkptBench(options->bench_options); });
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench_ckpt", SetupBenchCkpt);

}  // namespace loom::cli
