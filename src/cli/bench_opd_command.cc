// `loom bench opd [--quick] [--teachers N] [--resident K] [--rounds R] [--sequences S]`: the
// cost of switching between many teachers in an OPD step. JSON on the last line.

#include <memory>

#include "cli/bench_json.h"
#include "loom/bench/opd_bench.h"

namespace loom::cli {
namespace {

struct OpdCommandOptions {
  int threads = 0;
  bench::OpdBenchOptions bench_options;
};

void SetupBenchOpd(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto options = std::make_shared<OpdCommandOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "opd",
      "OPD step time with a batch spread over many teachers (a budget holding a few) vs "
      "one resident teacher");
  cmd->add_flag("--quick", options->bench_options.quick, "Small models, two rounds");
  cmd->add_option("--teachers", options->bench_options.teachers, "Teachers the batch spans")
      ->check(CLI::Range(2, 1000));
  cmd->add_option("--resident", options->bench_options.resident, "Teachers the memory budget holds")
      ->check(CLI::Range(1, 999));
  cmd->add_option("--rounds", options->bench_options.rounds, "Measured steps per configuration")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--sequences", options->bench_options.sequences,
                  "Sequences in the batch (96 tokens each; --quick: 80 of 48)")
      ->check(CLI::Range(2, 100000));
  cmd->add_option("--threads", options->threads, "Intra-op threads (default: LibTorch's)");
  cmd->add_flag("--json", "Accepted for symmetry: the result is always JSON");
  cmd->callback([options, &context] {
    context.exit_code = RunJsonBench("opd", options->threads,
                                     [&] { return bench::RunOpdBench(options->bench_options); });
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench_opd", SetupBenchOpd);

}  // namespace loom::cli
