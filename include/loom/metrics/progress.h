#pragma once
// ProgressLine: the one-line status display for long work (step, reward,
// accuracy, throughput, ETA).
//
// On a terminal the line is redrawn in place (carriage return) at most every
// `min_interval_s`. When the output is not a terminal (a log file, CI), a
// plain line is printed at most every `log_interval_s`, so logs stay short.
// Not thread-safe: one owner (the run loop). The clock is injected for tests.

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

namespace loom::metrics {

class ProgressLine {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic

  struct Options {
    bool is_terminal = false;
    double min_interval_s = 0.2;   // terminal redraw period
    double log_interval_s = 30.0;  // plain-line period when not a terminal
  };

  // Writes to `out` (null: nothing, as on ranks other than 0); `is_terminal`
  // is usually isatty(fileno(out)).
  ProgressLine(std::FILE* out, Options options, Clock clock = SteadySeconds);

  // Shows `text` for work that is `done` of `total` units (ETA from the
  // average rate since construction), then `suffix` (the whole run's part).
  // Returns whether anything was printed.
  bool Update(const std::string& text, int64_t done, int64_t total, const std::string& suffix = "");
  // Ends the line (a newline on a terminal) so later output starts clean.
  void Finish();

  static double SteadySeconds();
  // "1h02m", "3m05s", "42s".
  static std::string FormatDuration(double seconds);

 private:
  std::FILE* out_;
  Options options_;
  Clock clock_;
  double start_s_;
  double last_print_s_ = -1e300;
  bool drawn_ = false;
};

// The whole run's progress for the progress line: optimizer steps over all
// stages and an ETA — the current stage's remaining steps at its own rate so
// far, later stages' at the rate of everything this process has run.
class RunEta {
 public:
  // `done_at_start`: steps done before this process (a resumed run's).
  RunEta(int64_t done_at_start, int64_t total,
         ProgressLine::Clock clock = ProgressLine::SteadySeconds)
      : done_at_start_(done_at_start),
        total_(total),
        clock_(std::move(clock)),
        start_s_(clock_()),
        stage_start_s_(start_s_),
        stage_start_(done_at_start),
        stage_end_(total) {}

  // A stage begins at `done` steps and ends at `end`.
  void StageStarted(int64_t done, int64_t end);

  // "run 45/300 eta 3m05s" ("eta ?" before the stage's first step).
  std::string Text(int64_t done) const;

 private:
  int64_t done_at_start_;
  int64_t total_;
  ProgressLine::Clock clock_;
  double start_s_;
  double stage_start_s_;
  int64_t stage_start_;
  int64_t stage_end_;
};

}  // namespace loom::metrics
