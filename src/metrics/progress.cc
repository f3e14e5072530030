#include "loom/metrics/progress.h"

#include <algorithm>

#include <cmath>

namespace loom::metrics {

double ProgressLine::SteadySeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string ProgressLine::FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buffer[32];
  if (s >= 3600) {
    std::snprintf(buffer, sizeof buffer, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s % 3600 / 60));
  } else if (s >= 60) {
    std::snprintf(buffer, sizeof buffer, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buffer, sizeof buffer, "%llds", static_cast<long long>(s));
  }
  return buffer;
}

ProgressLine::ProgressLine(std::FILE* out, Options options, Clock clock)
    : out_(out), options_(options), clock_(std::move(clock)), start_s_(clock_()) {}

bool ProgressLine::Update(const std::string& text, int64_t done, int64_t total,
                          const std::string& suffix) {
  if (out_ == nullptr) return false;
  const double now = clock_();
  const double interval = options_.is_terminal ? options_.min_interval_s : options_.log_interval_s;
  const bool last = total > 0 && done >= total;
  if (now - last_print_s_ < interval && !last) return false;
  last_print_s_ = now;
  std::string eta = "?";
  if (done > 0 && total > 0) eta = FormatDuration((now - start_s_) / done * (total - done));
  std::string line = text + " | " + std::to_string(done) + "/" + std::to_string(total) + " | eta " +
                     eta + (suffix.empty() ? "" : " | " + suffix);
  if (options_.is_terminal) {
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    drawn_ = true;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
  return true;
}

void ProgressLine::Finish() {
  if (out_ == nullptr) return;
  if (options_.is_terminal && drawn_) std::fputc('\n', out_);
  drawn_ = false;
  std::fflush(out_);
}

void RunEta::StageStarted(int64_t done, int64_t end) {
  stage_start_s_ = clock_();
  stage_start_ = done;
  stage_end_ = end;
}

std::string RunEta::Text(int64_t done) const {
  const double now = clock_();
  const int64_t in_stage = done - stage_start_, here = done - done_at_start_;
  std::string eta = "?";
  if (in_stage > 0 && here > 0) {
    const double stage_rate = (now - stage_start_s_) / static_cast<double>(in_stage);
    const double run_rate = (now - start_s_) / static_cast<double>(here);
    eta = ProgressLine::FormatDuration(
        stage_rate * static_cast<double>(std::max<int64_t>(stage_end_ - done, 0)) +
        run_rate * static_cast<double>(std::max<int64_t>(total_ - stage_end_, 0)));
  }
  return "run " + std::to_string(done) + "/" + std::to_string(total_) + " eta " + eta;
}

}  // namespace loom::metrics
