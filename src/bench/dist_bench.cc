#include "loom/bench/dist_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "loom/base/child_process.h"
#include "loom/config/files.h"
#include "loom/dist/launch.h"
#include "loom/metrics/metrics_writer.h"

namespace loom::bench {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kWarmupSteps = 3;  // untimed: allocator, caches and the ranks settle

// The quickstart's model and task; SFT only, one thread per rank.
std::string BenchConfig(const DistBenchOptions& options, int64_t steps, int64_t batch) {
  const int hidden = options.quick ? 64 : 128, layers = options.quick ? 2 : 4;
  return absl::StrCat(R"(run:
  name: bench-dist
  seed: 1
  threads: 1
  deterministic: true
model:
  path: )",
                      options.dir, R"(/model
  arch: llama
  init:
    hidden_size: )",
                      hidden, R"(
    intermediate_size: )",
                      3 * hidden, R"(
    num_hidden_layers: )",
                      layers, R"(
    num_attention_heads: 4
    num_key_value_heads: 2
    head_dim: )",
                      hidden / 4, R"(
    max_position_embeddings: 512
tasks:
  eval_every: 0
  datasets:
    - name: arithmetic
      kind: arithmetic
      min_difficulty: 2
      max_difficulty: 2
      eval_size: 8
effort:
  levels: [100]
  in_prompt: false
rollout:
  max_new_tokens: 16
train:
  stages: [sft]
  sft:
    steps: )",
                      steps, R"(
    batch_sequences: )",
                      batch, "\n");
}

struct RunFigures {
  double step_seconds = 0, allreduce_seconds = 0;
  int64_t samples = 0, steps = 0;
  std::vector<double> losses;
};

// The timed step lines of a run directory's rank-0 metrics.
absl::StatusOr<RunFigures> ReadFigures(const std::string& run_dir, int64_t batch) {
  auto records = metrics::ReadMetrics(run_dir + "/metrics.jsonl");
  if (!records.ok()) return records.status();
  RunFigures figures;
  for (const nlohmann::json& r : *records) {
    if (!r.contains("loss") || r.contains("eval_accuracy")) continue;
    figures.losses.push_back(r["loss"].get<double>());
    if (r["step"].get<int64_t>() <= kWarmupSteps) continue;
    figures.step_seconds += r["step_seconds"].get<double>();
    figures.allreduce_seconds += r.value("allreduce_seconds", 0.0);
    figures.samples += batch;
    ++figures.steps;
  }
  if (figures.steps == 0 || figures.step_seconds <= 0) {
    return absl::InternalError(run_dir + " logged no timed step");
  }
  return figures;
}

// Trains `ranks` ranks on `config` and reads rank 0's step lines.
absl::StatusOr<RunFigures> Run(const DistBenchOptions& options, const std::string& config,
                               int ranks, int64_t batch) {
  const std::string run_dir = absl::StrCat(options.dir, "/run-", ranks);
  fs::remove_all(run_dir);
  dist::LaunchOptions launch;
  launch.nproc = ranks;
  launch.binary = options.binary;
  launch.args = {"train", "--config", config, "--run-dir", run_dir};
  launch.log = absl::StrCat(options.dir, "/run-", ranks, ".log");
  auto code = dist::LaunchLocal(launch);
  if (!code.ok()) return code.status();
  if (*code != 0) {
    return absl::InternalError(
        absl::StrCat("the ", ranks, "-rank run exited with status ", *code, "; see ", launch.log));
  }
  return ReadFigures(run_dir, batch);
}

// What this machine gives two processes at once: two unconnected 1-rank
// runs, each on half the batch, side by side. Their summed throughput is
// the ceiling for 2 ranks here (a slower core, memory bandwidth), with no
// collective at all.
absl::StatusOr<double> IndependentPair(const DistBenchOptions& options, const std::string& config,
                                       int64_t batch) {
  std::vector<pid_t> children;
  for (int k = 0; k < 2; ++k) {
    ChildOptions child;
    const std::string run_dir = absl::StrCat(options.dir, "/independent-", k);
    fs::remove_all(run_dir);
    child.argv = {
        options.binary, "train", "--config", config,
        "--run-dir",    run_dir, "--set",    absl::StrCat("train.sft.batch_sequences=", batch / 2)};
    child.unset_env = {"RANK", "WORLD_SIZE", "SLURM_PROCID"};
    child.output = run_dir + ".log";
    absl::StatusOr<pid_t> pid = StartChild(child);
    if (!pid.ok()) {
      for (pid_t started : children) KillChild(started);
      return pid.status();
    }
    children.push_back(*pid);
  }
  bool failed = false;
  for (pid_t child : children) {
    absl::StatusOr<int> code = WaitChild(child);
    failed = failed || !code.ok() || *code != 0;
  }
  if (failed) {
    return absl::InternalError("an independent run failed; see " + options.dir +
                               "/independent-*.log");
  }
  double rate = 0;
  for (int k = 0; k < 2; ++k) {
    auto figures = ReadFigures(absl::StrCat(options.dir, "/independent-", k), batch / 2);
    if (!figures.ok()) return figures.status();
    rate += static_cast<double>(figures->samples) / figures->step_seconds;
  }
  return rate;
}

double InterpolatedMedian(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunDistBench(const DistBenchOptions& options) {
  const int64_t steps = options.steps > 0 ? options.steps : (options.quick ? 6 : 30);
  if (steps <= kWarmupSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps: need more than ", kWarmupSteps, " (the warm-up steps)"));
  }
  const int64_t batch = options.batch > 0 ? options.batch : (options.quick ? 16 : 256);
  const int repeats = options.rounds > 0 ? options.rounds : (options.quick ? 1 : 3);
  double load[1] = {0};
  getloadavg(load, 1);
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) return absl::UnavailableError("cannot create " + options.dir + ": " + ec.message());
  const std::string config = options.dir + "/bench-dist.yaml";
  if (absl::Status s = WriteFileAtomic(config, BenchConfig(options, steps, batch)); !s.ok()) {
    return s;
  }
  // Rounds of (1 rank, 2 ranks, the independent pair), back to back, so a
  // slow spell of the machine hits all three of a round; medians over rounds.
  std::vector<double> rate_1, rate_2, pair, speedup, share, allreduce_ms;
  double max_loss_diff = 0;
  int64_t timed_steps = 0;
  for (int round = 0; round < repeats; ++round) {
    auto one = Run(options, config, 1, batch);  // the first also creates the model
    if (!one.ok()) return one.status();
    auto two = Run(options, config, 2, batch);
    if (!two.ok()) return two.status();
    auto independent = IndependentPair(options, config, batch);
    if (!independent.ok()) return independent.status();
    for (size_t i = 0; i < std::min(one->losses.size(), two->losses.size()); ++i) {
      max_loss_diff = std::max(max_loss_diff, std::abs(one->losses[i] - two->losses[i]));
    }
    rate_1.push_back(static_cast<double>(one->samples) / one->step_seconds);
    rate_2.push_back(static_cast<double>(two->samples) / two->step_seconds);
    pair.push_back(*independent);
    speedup.push_back(rate_2.back() / rate_1.back());
    share.push_back(two->allreduce_seconds / two->step_seconds);
    allreduce_ms.push_back(1e3 * two->allreduce_seconds / static_cast<double>(two->steps));
    timed_steps = two->steps;
  }
  return nlohmann::json{
      {"ranks", 2},
      {"threads_per_rank", 1},
      {"steps", steps},
      {"batch_sequences", batch},
      {"timed_steps", timed_steps},
      {"rounds", repeats},
      {"samples_per_s_1_rank", InterpolatedMedian(rate_1)},
      {"samples_per_s_2_ranks", InterpolatedMedian(rate_2)},
      {"samples_per_s_2_independent", InterpolatedMedian(pair)},
      {"speedups", speedup},
      {"ceiling_2_vs_1", InterpolatedMedian(pair) / InterpolatedMedian(rate_1)},
      {"scaling_efficiency", InterpolatedMedian(rate_2) / InterpolatedMedian(pair)},
      {"allreduce_share", InterpolatedMedian(share)},
      {"allreduce_ms_per_step", InterpolatedMedian(allreduce_ms)},
      {"max_loss_diff", max_loss_diff},
      {"load_avg_start", load[0]},
      {"speedup_2_ranks_vs_1", InterpolatedMedian(speedup)}};
}

}  // namespace loom::bench
