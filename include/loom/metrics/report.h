#pragma once
// `loom report`: a run's curves as PNG plots drawn by gnuplot, and an
// index.html that shows them with the run's config and final numbers.
//
// Each plot takes its series from metrics.jsonl — training-step lines or
// held-out evaluation lines — against the policy version (optimizer steps
// over all stages); a key that holds an object (reward_by_effort) gives one
// series per entry. A plot none of whose keys a run logged is left out.
// With more than one run (`compare`), every plot overlays their series,
// labelled by run directory. The held-out evaluations `loom eval --save
// RUN_DIR` appended to RUN_DIR/evaluations.jsonl (a line each: the model,
// its single-turn rows and its agent rows, dataset × scaffold × effort)
// follow as tables.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::metrics {

// Where `loom eval --save RUN_DIR` appends its results.
inline constexpr char kEvaluationsFile[] = "evaluations.jsonl";

struct ReportOptions {
  std::vector<std::string> runs;  // run directories; the first is the report's own
  std::string out_dir;            // "" = <first run>/report
  std::string gnuplot = "gnuplot";
  int width = 900;  // pixels of every PNG
  int height = 500;
};

struct Report {
  std::string index;               // out_dir/index.html
  std::vector<std::string> plots;  // the PNGs written, in index order
};

// NOT_FOUND naming the file when a run has no metrics.jsonl, DATA_LOSS naming
// file:line for a malformed line, FAILED_PRECONDITION when gnuplot is not
// on the PATH or fails (its stderr in the message), INVALID_ARGUMENT when a
// run has no line to plot.
absl::StatusOr<Report> WriteReport(const ReportOptions& options);

}  // namespace loom::metrics
