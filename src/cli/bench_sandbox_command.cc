// `loom bench sandbox [--worker ADDR] [--sessions N] [--episodes N] [--json]`:
// session open -> run `true` -> close latency (p50/p99, sequential; and
// open -> close alone, to separate the sandboxed command's cost), then
// episodes/s with 16 and 64 concurrent sessions (each episode: one bash call,
// then submit, verified by exact answer). Without --worker it starts one local
// worker with 64 sandbox slots. The last line of output is the JSON result.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/command.h"
#include "loom/config/logging.h"
#include "loom/rpc/channel.h"
#include "loom/rpc/local_workers.h"
#include "loom/rpc/worker_pool.h"

namespace loom::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchFlags {
  std::string worker;
  int sessions = 100;
  int episodes = 128;
  bool json = false;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t i = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  return values[i];
}

v1::GenerateReply ScriptedTurn(const v1::GenerateRequest& request) {
  v1::GenerateReply reply;
  v1::ToolCall* call = reply.mutable_assistant()->add_tool_calls();
  call->set_id("c0");
  if (request.turn() == 0) {
    call->set_name("bash");
    call->set_arguments_json(R"({"command": "echo 42"})");
  } else {
    call->set_name("submit");
    call->set_arguments_json(R"({"answer": "42"})");
  }
  return reply;
}

// Sequential open -> true -> close round trips (open -> close only when
// `run_true` is false); returns latencies in ms.
std::vector<double> MeasureSessions(rpc::WorkerPool& pool, int n, bool run_true, int* errors) {
  std::vector<double> ms;
  v1::ToolCall call;
  call.set_name("bash");
  call.set_arguments_json(R"({"command": "true"})");
  for (int i = 0; i < n; ++i) {
    Clock::time_point start = Clock::now();
    auto session = pool.OpenSession(v1::OpenSession());
    bool ok =
        session.ok() && (!run_true || (*session)->Call(call).ok()) && (*session)->Close().ok();
    if (!ok) ++*errors;
    ms.push_back(Ms(Clock::now() - start));
  }
  return ms;
}

// Episodes per second with `concurrency` threads sharing `total` episodes.
double MeasureEpisodes(rpc::WorkerPool& pool, int concurrency, int total, int* errors) {
  v1::RunEpisode episode;
  episode.mutable_task()->set_id("bench");
  episode.mutable_task()->set_problem("Print 42.");
  episode.mutable_task()->mutable_verification()->set_exact_answer("42");
  std::atomic<int> next{0}, failed{0};
  Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      while (next++ < total) {
        v1::Trajectory trajectory =
            pool.RunEpisode(episode, [](const v1::GenerateRequest& r) { return ScriptedTurn(r); });
        if (trajectory.penalty() || trajectory.verdict().reward() != 1.0) ++failed;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  *errors += failed;
  return total / std::chrono::duration<double>(Clock::now() - start).count();
}

int RunBench(const BenchFlags& flags, const Context& context) {
  SetupLogging(context.log_level_given ? context.log_level : "warn").IgnoreError();
  std::unique_ptr<rpc::LocalWorkers> local;
  rpc::PoolOptions options;
  if (flags.worker.empty()) {
    rpc::LocalWorkerOptions local_options;
    local_options.max_sandboxes = 64;
    local_options.extra_args = {"--log-level", "warn"};
    auto started = rpc::LocalWorkers::Start(local_options);
    if (!started.ok()) {
      std::cerr << "loom bench sandbox: " << started.status().message() << "\n";
      return kExitFailure;
    }
    local = *std::move(started);
    options.targets = local->targets();
  } else {
    options.targets = {flags.worker};
  }
  rpc::WorkerPool pool(options);
  int errors = 0;
  std::vector<double> open_close = MeasureSessions(pool, flags.sessions, false, &errors);
  std::vector<double> latency = MeasureSessions(pool, flags.sessions, true, &errors);
  double eps16 = MeasureEpisodes(pool, 16, flags.episodes, &errors);
  double eps64 = MeasureEpisodes(pool, 64, flags.episodes, &errors);
  nlohmann::ordered_json result = {{"bench", "sandbox"},
                                   {"sessions", flags.sessions},
                                   {"session_open_true_close_ms_p50", Percentile(latency, 0.5)},
                                   {"session_open_true_close_ms_p99", Percentile(latency, 0.99)},
                                   {"session_open_close_ms_p50", Percentile(open_close, 0.5)},
                                   {"episodes", flags.episodes},
                                   {"episodes_per_s_16", eps16},
                                   {"episodes_per_s_64", eps64},
                                   {"errors", errors}};
  if (!flags.json) {
    std::cout << "open->true->close p50 " << result["session_open_true_close_ms_p50"] << " ms, p99 "
              << result["session_open_true_close_ms_p99"] << " ms; episodes/s at 16: " << eps16
              << ", at 64: " << eps64 << "; errors " << errors << "\n";
  }
  std::cout << result.dump() << std::endl;
  return errors == 0 ? kExitOk : kExitFailure;
}

void SetupBenchSandbox(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* cmd = bench->add_subcommand("sandbox", "Sandbox session latency and episode rate");
  cmd->add_option("--worker", flags->worker, "Use this worker instead of starting a local one");
  cmd->add_option("--sessions", flags->sessions, "Sequential sessions for the latency figures")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--episodes", flags->episodes, "Episodes per concurrency level")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print only the JSON line");
  cmd->callback([flags, &context] { context.exit_code = RunBench(*flags, context); });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench_sandbox", SetupBenchSandbox);

}  // namespace loom::cli
