// The rollout benchmark (see rollout_bench.h). Each measurement is one function that
// builds its own engine over the shared model.

#include "loom/bench/rollout_bench.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "loom/model/transformer.h"
#include "loom/rollout/engine.h"

namespace loom::bench {
namespace {

using rollout::EngineOptions;
using rollout::RolloutEngine;
using rollout::SampleRequest;
using rollout::WeightUpdatePolicy;

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

absl::StatusOr<std::unique_ptr<model::Transformer>> BenchModel(const RolloutBenchOptions& o) {
  if (!o.model_dir.empty()) return model::Transformer::Load(o.model_dir, {});
  auto config = model::DefaultModelConfig("llama");
  if (!config.ok()) return config.status();
  // Small enough that re-prefilling 64 x 1024 tokens twice fits the quick run on 2 cores.
  config->vocab_size = 512;
  config->hidden_size = 32;
  config->intermediate_size = 64;
  config->num_hidden_layers = 1;
  config->num_attention_heads = 2;
  config->num_key_value_heads = 1;
  config->head_dim = 16;
  config->max_position_embeddings = 8192;  // room for the agent workload's 4,160-token prompts
  return model::Transformer::RandomInit(*config, o.seed, {});
}

SampleRequest BenchRequest(uint64_t id, int64_t prompt_length, int64_t max_new, int64_t vocab) {
  SampleRequest r;
  r.id = id;
  std::mt19937_64 gen(id);
  for (int64_t i = 0; i < prompt_length; ++i) r.prompt.push_back(gen() % vocab);
  r.stop.max_new_tokens = max_new;
  r.sampling.temperature = 0.0;
  return r;
}

absl::StatusOr<std::unique_ptr<RolloutEngine>> BenchEngine(const model::Transformer& m,
                                                           int64_t batch, int64_t tokens_each) {
  EngineOptions options;
  options.max_batch = batch;
  options.step_token_budget = 4096;
  options.pool_tokens = batch * (tokens_each + 32);
  return RolloutEngine::Create(m, options);
}

// Decode tokens per second at `batch` samples: 16-token prompts, prefill untimed.
absl::StatusOr<double> DecodeThroughput(const model::Transformer& m, int64_t batch,
                                        int64_t new_tokens) {
  auto engine = BenchEngine(m, batch, 16 + new_tokens);
  if (!engine.ok()) return engine.status();
  const int64_t vocab = m.config().vocab_size;
  for (int64_t id = 0; id < batch; ++id) {
    if (auto s = (*engine)->Add(BenchRequest(id, 16, new_tokens, vocab)); !s.ok()) return s;
  }
  if (auto first = (*engine)->Step(); !first.ok()) return first.status();  // prefill
  int64_t decoded = 0;
  const auto start = Clock::now();
  while ((*engine)->num_running() > 0) {
    auto stats = (*engine)->Step();
    if (!stats.ok()) return stats.status();
    decoded += stats->decode_tokens;
  }
  return decoded / Seconds(start);
}

// Interrupts requested from another thread at random moments of a decoding
// batch of 32: steps between request and park, and milliseconds.
absl::StatusOr<json> InterruptLatency(const model::Transformer& m, int64_t rounds) {
  auto engine = BenchEngine(m, 32, 1024);
  if (!engine.ok()) return engine.status();
  RolloutEngine& e = **engine;
  for (int64_t id = 0; id < 32; ++id) {
    if (auto s = e.Add(BenchRequest(id, 16, 1000, m.config().vocab_size)); !s.ok()) return s;
  }
  std::vector<double> steps, ms;
  std::mt19937 gen(1);
  double step_seconds = 0.0;
  for (int64_t round = 0; round < rounds && e.num_running() + e.num_waiting() > 0; ++round) {
    const auto start = Clock::now();
    auto first = e.Step();  // measures the step length this round
    if (!first.ok()) return first.status();
    step_seconds = Seconds(start);
    const auto delay = std::chrono::duration<double>(step_seconds * (gen() % 2000) / 1000.0);
    std::thread requester([&] {
      std::this_thread::sleep_for(delay);
      e.RequestInterrupt();
    });
    while (true) {
      auto stats = e.Step();
      if (!stats.ok()) {
        requester.join();
        return stats.status();
      }
      if (stats->parked) break;
    }
    requester.join();
    steps.push_back(e.counters().last_interrupt_steps);
    ms.push_back(e.counters().last_interrupt_ms);
    if (auto s = e.Resume(e.policy_version()); !s.ok()) return s;
  }
  return json{{"interrupt_latency_steps_p99", Percentile(steps, 0.99)},
              {"interrupt_latency_steps_max", Percentile(steps, 1.0)},
              {"interrupt_latency_ms_p99", Percentile(ms, 0.99)},
              {"interrupt_rounds", steps.size()},
              {"decode_step_ms", step_seconds * 1e3}};
}

void PerturbInPlace(model::Transformer& m, uint64_t seed) {
  at::NoGradGuard no_grad;
  at::manual_seed(seed);
  for (at::Tensor p : m.Parameters()) {
    if (p.dim() > 1) p.add_(at::randn(p.sizes(), p.options()) * 0.01);
  }
}

// Seconds until each of samples 0..n-1 has one more token.
absl::StatusOr<double> TimeToNextToken(RolloutEngine& e, int64_t n) {
  std::vector<int64_t> before(n);
  for (int64_t id = 0; id < n; ++id) before[id] = e.Find(id)->length();
  const auto start = Clock::now();
  auto all_advanced = [&] {
    for (int64_t id = 0; id < n; ++id) {
      if (e.Find(id)->length() == before[id]) return false;
    }
    return true;
  };
  while (!all_advanced()) {
    if (auto stats = e.Step(); !stats.ok()) return stats.status();
  }
  return Seconds(start);
}

// 64 samples with long prefixes, parked; the weights change; time to the next
// token with the KV kept vs re-prefilled. Also the KV memory ratio there.
absl::StatusOr<json> ResumeVsReprefill(model::Transformer& m, const RolloutBenchOptions& o) {
  const int64_t n = o.resume_samples, prefix = o.resume_prefix;
  // Early samples keep decoding while later ones prefill: room for 128 tokens.
  auto engine = BenchEngine(m, n, prefix + 128);
  if (!engine.ok()) return engine.status();
  RolloutEngine& e = **engine;
  for (int64_t id = 0; id < n; ++id) {
    if (auto s = e.Add(BenchRequest(id, prefix, 128, m.config().vocab_size)); !s.ok()) return s;
  }
  auto all_decoding = [&] {
    for (int64_t id = 0; id < n; ++id) {
      if (e.Find(id)->length() <= prefix || e.CachedTokens(id) != e.Find(id)->length() - 1) {
        return false;
      }
    }
    return true;
  };
  while (!all_decoding()) {
    if (e.num_running() + e.num_waiting() == 0)
      return absl::InternalError("samples finished early");
    if (auto s = e.Step(); !s.ok()) return s.status();
  }
  e.ParkAll();
  const double theoretical = static_cast<double>(e.CachedTokensTotal()) * e.pool().BytesPerToken();
  const double ratio = theoretical / static_cast<double>(e.pool().AllocatedBytes());
  const int64_t prefix_tokens = e.CachedTokensTotal() / n;

  PerturbInPlace(m, 1);
  if (auto s = e.Resume(1, WeightUpdatePolicy::kKeep); !s.ok()) return s;
  const int64_t prefill_before = e.counters().prefill_tokens;
  auto keep = TimeToNextToken(e, n);
  if (!keep.ok()) return keep.status();
  const int64_t keep_prefill = e.counters().prefill_tokens - prefill_before;

  e.ParkAll();
  PerturbInPlace(m, 2);
  if (auto s = e.Resume(2, WeightUpdatePolicy::kRecompute); !s.ok()) return s;
  auto recompute = TimeToNextToken(e, n);
  if (!recompute.ok()) return recompute.status();
  return json{{"resume_samples", n},
              {"resume_prefix_tokens", prefix_tokens},
              {"resume_keep_s", *keep},
              {"resume_keep_prefill_tokens", keep_prefill},
              {"reprefill_s", *recompute},
              {"resume_vs_reprefill_speedup", *recompute / *keep},
              {"kv_bytes_per_token_ratio", ratio},
              {"kv_block_size", e.pool().block_size()}};
}

// One prefix workload, run without sharing or with it: the time until every
// sample has its first token (prefill), the KV bytes of the blocks under the
// prompts then, and decode tokens/s from there to the end.
struct PrefixRun {
  double prefill_s = 0;
  int64_t prompt_kv_bytes = 0;
  double decode_tokens_per_s = 0;
  int64_t prefill_tokens = 0;
  int64_t hit_tokens = 0;
};

absl::StatusOr<PrefixRun> RunPrefixWorkload(const model::Transformer& m,
                                            const std::vector<SampleRequest>& requests,
                                            bool share) {
  int64_t tokens = 0;
  for (const SampleRequest& r : requests) tokens += r.prompt.size() + r.stop.max_new_tokens;
  EngineOptions options;
  options.max_batch = static_cast<int64_t>(requests.size());
  options.step_token_budget = 4096;
  options.pool_tokens = tokens + 32 * static_cast<int64_t>(requests.size());
  options.prefix_cache = share;
  auto engine = RolloutEngine::Create(m, options);
  if (!engine.ok()) return engine.status();
  RolloutEngine& e = **engine;
  for (const SampleRequest& r : requests) {
    if (auto s = e.Add(r); !s.ok()) return s;
  }
  auto all_started = [&] {
    for (const SampleRequest& r : requests) {
      const rollout::SampleState* state = e.Find(r.id);
      if (state != nullptr && state->generated == 0) return false;
    }
    return true;
  };
  PrefixRun run;
  const auto start = Clock::now();
  while (!all_started()) {
    if (auto s = e.Step(); !s.ok()) return s.status();
  }
  run.prefill_s = Seconds(start);
  // The distinct blocks under the samples' prompts (earlier samples may have
  // decoded far by now: their later blocks are not the prompts').
  std::set<int32_t> prompt_blocks;
  for (const SampleRequest& r : requests) {
    const std::vector<int32_t> table = e.BlockTable(r.id);
    const int64_t count = e.pool().BlocksFor(static_cast<int64_t>(r.prompt.size()));
    prompt_blocks.insert(table.begin(), table.begin() + std::min<int64_t>(count, table.size()));
  }
  run.prompt_kv_bytes = static_cast<int64_t>(prompt_blocks.size()) * e.pool().BytesPerBlock();
  const int64_t decoded_before = e.counters().decode_tokens;
  const auto decode_start = Clock::now();
  while (e.num_running() + e.num_waiting() > 0) {
    if (auto s = e.Step(); !s.ok()) return s.status();
  }
  run.decode_tokens_per_s = (e.counters().decode_tokens - decoded_before) / Seconds(decode_start);
  run.prefill_tokens = e.counters().prefill_tokens;
  run.hit_tokens = e.counters().prefix_hit_tokens;
  return run;
}

absl::StatusOr<json> PrefixWorkload(const model::Transformer& m,
                                    const std::vector<SampleRequest>& requests) {
  json result = {{"samples", requests.size()}, {"prompt_tokens", requests[0].prompt.size()}};
  std::vector<PrefixRun> runs;
  for (bool share : {false, true}) {
    auto run = RunPrefixWorkload(m, requests, share);
    if (!run.ok()) return run.status();
    result[share ? "shared" : "unshared"] = {{"prefill_s", run->prefill_s},
                                             {"prompt_kv_bytes", run->prompt_kv_bytes},
                                             {"decode_tokens_per_s", run->decode_tokens_per_s},
                                             {"prefill_tokens", run->prefill_tokens},
                                             {"prefix_hit_tokens", run->hit_tokens}};
    runs.push_back(*run);
  }
  result["prefill_speedup"] = runs[0].prefill_s / runs[1].prefill_s;
  result["prompt_kv_bytes_ratio"] =
      static_cast<double>(runs[0].prompt_kv_bytes) / runs[1].prompt_kv_bytes;
  result["decode_ratio"] = runs[1].decode_tokens_per_s / runs[0].decode_tokens_per_s;
  return result;
}

absl::StatusOr<json> PrefixSharing(const model::Transformer& m, const RolloutBenchOptions& o) {
  const int64_t vocab = m.config().vocab_size;
  const int64_t new_tokens = o.prefix_new_tokens;
  // A GRPO group: one prompt, sampled at temperature 1.
  std::vector<SampleRequest> group;
  for (int64_t i = 0; i < o.group_size; ++i) {
    SampleRequest r = BenchRequest(0, o.group_prompt, new_tokens, vocab);
    r.id = i;
    r.sampling.temperature = 1.0;
    group.push_back(std::move(r));
  }
  // Agent episodes: one system prompt, then each episode's own task.
  const SampleRequest system = BenchRequest(1u << 20, o.agent_system, new_tokens, vocab);
  std::vector<SampleRequest> agents;
  for (int64_t i = 0; i < o.agent_episodes; ++i) {
    SampleRequest r = BenchRequest(i, o.agent_task, new_tokens, vocab);
    r.prompt.insert(r.prompt.begin(), system.prompt.begin(), system.prompt.end());
    r.sampling.temperature = 1.0;
    agents.push_back(std::move(r));
  }
  auto grpo = PrefixWorkload(m, group);
  if (!grpo.ok()) return grpo.status();
  auto agent = PrefixWorkload(m, agents);
  if (!agent.ok()) return agent.status();
  return json{{"prefix_group", *grpo}, {"prefix_agents", *agent}};
}

}  // namespace

RolloutBenchOptions QuickRolloutBench() {
  RolloutBenchOptions o;
  o.decode_tokens = 32;
  o.interrupt_rounds = 30;
  o.prefix_new_tokens = 32;
  return o;
}

absl::StatusOr<std::string> RunRolloutBench(const RolloutBenchOptions& options) {
  try {
    auto m = BenchModel(options);
    if (!m.ok()) return m.status();
    json result = {{"bench", "rollout"},
                   {"model_parameters", (*m)->NumParameters()},
                   {"threads", at::get_num_threads()}};
    if (options.prefix) {
      auto phase = Clock::now();
      auto prefix = PrefixSharing(**m, options);
      if (!prefix.ok()) return prefix.status();
      result.update(*prefix);
      result["phase_seconds"]["prefix"] = Seconds(phase);
      return result.dump();
    }
    json throughput = json::object();
    auto phase = Clock::now();
    for (int64_t batch : options.batch_sizes) {
      auto tps = DecodeThroughput(**m, batch, options.decode_tokens);
      if (!tps.ok()) return tps.status();
      throughput[std::to_string(batch)] = *tps;
    }
    result["decode_tokens_per_s"] = throughput;
    result["phase_seconds"]["decode"] = Seconds(phase);
    phase = Clock::now();
    auto interrupt = InterruptLatency(**m, options.interrupt_rounds);
    if (!interrupt.ok()) return interrupt.status();
    result.update(*interrupt);
    result["phase_seconds"]["interrupt"] = Seconds(phase);
    phase = Clock::now();
    auto resume = ResumeVsReprefill(**m, options);
    if (!resume.ok()) return resume.status();
    result.update(*resume);
    result["phase_seconds"]["resume"] = Seconds(phase);
    return result.dump();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("bench rollout: ", e.what_without_backtrace()));
  }
}

}  // namespace loom::bench
