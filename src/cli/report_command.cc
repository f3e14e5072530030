// `loom report RUN_DIR [--compare RUN_DIR]... [--out DIR]`: PNG plots of a
// run's metrics (gnuplot) and an index.html with its config and final
// numbers; --compare overlays other runs. Exit 1 when something is missing
// (metrics, gnuplot), 2 for a malformed metrics file.

#include <iostream>
#include <memory>

#include "cli/command.h"
#include "loom/metrics/report.h"

namespace loom::cli {
namespace {

struct ReportFlags {
  std::string run_dir;
  std::vector<std::string> compare;
  std::string out;
};

int RunReport(const ReportFlags& flags) {
  metrics::ReportOptions options;
  options.runs = {flags.run_dir};
  options.runs.insert(options.runs.end(), flags.compare.begin(), flags.compare.end());
  options.out_dir = flags.out;
  auto report = metrics::WriteReport(options);
  if (!report.ok()) {
    std::cerr << "loom report: " << report.status().message() << "\n";
    return report.status().code() == absl::StatusCode::kDataLoss ? kExitUsage : kExitFailure;
  }
  for (const std::string& plot : report->plots) std::cout << plot << "\n";
  std::cout << report->index << "\n";
  return kExitOk;
}

void SetupReport(CLI::App& app, Context& context) {
  auto flags = std::make_shared<ReportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Plot a run's metrics (PNG, gnuplot) with an index.html of config and results");
  cmd->add_option("run_dir", flags->run_dir, "The run directory")->required();
  cmd->add_option("--compare", flags->compare, "Other run directories to overlay (repeatable)");
  cmd->add_option("--out", flags->out, "Output directory (default: RUN_DIR/report)");
  cmd->callback([flags, &context] { context.exit_code = RunReport(*flags); });
}

}  // namespace

LOOM_REGISTER_COMMAND("report", SetupReport);

}  // namespace loom::cli
