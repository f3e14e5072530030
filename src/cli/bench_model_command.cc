// `loom bench model [--json] [--threads N] [--quick]`: throughput of the
// ~18M-parameter Llama of TARGETS.md (hidden 512, 6 layers, 8 heads, 4 KV
// heads, head_dim 64, intermediate 1408) on this machine: greedy decode with
// the paged KV cache and by recomputation at batch 1/8/64 (16-token prompt),
// prefill, a training step (forward, backward, AdamW; 8 x 256 tokens) in
// float32 and with bfloat16 autocast side by side, a
// forward and backward on episode-length sequences with the CPU tensor cache
// off and on, KV bytes per token against theory, and the matmul roofline
// measured in the same run. The JSON result is the last line of stdout.

#include <sys/resource.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/threads.h"
#include "loom/config/run_section.h"
#include "loom/model/batch.h"
#include "loom/model/cpu_allocator.h"
#include "loom/model/transformer.h"

namespace loom::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<int64_t> Prompt(int64_t n, int64_t seed, int64_t vocab) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((seed * 131 + i * 7919) % vocab);
  return p;
}

// Greedy decode of `batch` samples: prefill `prompt` tokens, then `steps`
// one-token steps. Returns decode tokens/s (prefill excluded) and fills the
// KV accounting.
double DecodeWithCache(const model::Transformer& m, int64_t batch, int64_t prompt, int64_t steps,
                       json* kv) {
  model::KvBlockPool pool(m.PoolOptions(batch * (prompt + steps + 16), 16));
  std::vector<model::KvSequence> seqs(batch);
  std::vector<model::StepInput> in(batch);
  for (int64_t b = 0; b < batch; ++b) in[b] = {&seqs[b], Prompt(prompt, b, m.config().vocab_size)};
  auto out = m.Step(in, pool);
  Clock::time_point start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    at::Tensor next = out->logits.argmax(-1);
    for (int64_t b = 0; b < batch; ++b) in[b].tokens = {next[b].item<int64_t>()};
    out = m.Step(in, pool);
  }
  double seconds = Since(start);
  if (kv != nullptr) {
    int64_t tokens = 0;
    for (const auto& s : seqs) tokens += s.length;
    (*kv)["theoretical_bytes_per_token"] = pool.BytesPerToken();
    (*kv)["allocated_bytes_per_token"] = static_cast<double>(pool.AllocatedBytes()) / tokens;
    (*kv)["theoretical_over_allocated"] =
        static_cast<double>(pool.BytesPerToken()) * tokens / pool.AllocatedBytes();
  }
  return batch * steps / seconds;
}

// The same decode without a cache: every step runs the whole sequences again.
double DecodeByRecompute(const model::Transformer& m, int64_t batch, int64_t prompt,
                         int64_t steps) {
  std::vector<std::vector<int64_t>> seqs;
  for (int64_t b = 0; b < batch; ++b) seqs.push_back(Prompt(prompt, b, m.config().vocab_size));
  Clock::time_point start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    model::PackedBatch packed = model::TeacherForcingBatch(seqs);
    std::vector<int64_t> last;
    int64_t offset = 0;
    for (const auto& seq : seqs) last.push_back(offset += seq.size()), last.back() -= 1;
    model::ScoreOptions options;
    options.full_vocab_rows = at::tensor(last, at::kLong);
    at::Tensor next = m.Score(packed, options)->full_logprobs.argmax(-1);
    for (int64_t b = 0; b < batch; ++b) seqs[b].push_back(next[b].item<int64_t>());
  }
  return batch * steps / Since(start);
}

double PrefillTokensPerSecond(const model::Transformer& m, int64_t batch, int64_t prompt) {
  model::KvBlockPool pool(m.PoolOptions(batch * prompt + 64, 16));
  std::vector<model::KvSequence> seqs(batch);
  std::vector<model::StepInput> in(batch);
  for (int64_t b = 0; b < batch; ++b) in[b] = {&seqs[b], Prompt(prompt, b, m.config().vocab_size)};
  Clock::time_point start = Clock::now();
  (void)m.Step(in, pool);
  return batch * prompt / Since(start);
}

// `batch` pseudo-random sequences of `length` tokens, teacher-forced.
model::PackedBatch TrainBatch(int64_t batch, int64_t length, int64_t vocab_size) {
  std::vector<std::vector<int64_t>> seqs;
  for (int64_t b = 0; b < batch; ++b) seqs.push_back(Prompt(length, b, vocab_size));
  return model::TeacherForcingBatch(seqs);
}

// One training step (forward, backward, AdamW) on `packed`; returns its loss
// and adds its time to `seconds`.
double TrainStep(model::Transformer& m, torch::optim::AdamW& opt, const model::PackedBatch& packed,
                 int64_t tokens, double& seconds) {
  Clock::time_point start = Clock::now();
  opt.zero_grad();
  at::Tensor loss = -m.Score(packed)->logprobs.sum() / tokens;
  loss.backward();
  opt.step();
  seconds += Since(start);
  return loss.item<double>();
}

double TrainTokensPerSecond(model::Transformer& m, int64_t batch, int64_t length, int steps) {
  m.SetRequiresGrad(true);
  torch::optim::AdamW opt(m.Parameters(), torch::optim::AdamWOptions(1e-4));
  const model::PackedBatch packed = TrainBatch(batch, length, m.config().vocab_size);
  double warmup = 0, seconds = 0;
  TrainStep(m, opt, packed, batch * length, warmup);
  for (int s = 0; s < steps; ++s) TrainStep(m, opt, packed, batch * length, seconds);
  m.SetRequiresGrad(false);
  return batch * length * steps / seconds;
}

// A training step (forward, backward, AdamW) of two copies of one model,
// float32 and with bfloat16 autocast, alternating per round. Also the first
// step's loss of each, on the same weights and batch: autocast changes the
// numerics, and the two losses say by how much.
json TrainAutocast(const model::ModelConfig& config, int64_t batch, int64_t length, int rounds) {
  const model::PackedBatch packed = TrainBatch(batch, length, config.vocab_size);
  std::unique_ptr<model::Transformer> models[2];
  std::unique_ptr<torch::optim::AdamW> optimizers[2];
  double seconds[2] = {0, 0}, first_loss[2] = {0, 0};
  for (int autocast : {0, 1}) {
    models[autocast] =
        model::Transformer::RandomInit(config, 0, {at::kFloat, at::kCPU, true, autocast == 1});
    optimizers[autocast] = std::make_unique<torch::optim::AdamW>(models[autocast]->Parameters(),
                                                                 torch::optim::AdamWOptions(1e-4));
  }
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
    for (int autocast : {0, 1}) {
      double warmup = 0;
      const double loss = TrainStep(*models[autocast], *optimizers[autocast], packed,
                                    batch * length, r > 0 ? seconds[autocast] : warmup);
      if (r == 0) first_loss[autocast] = loss;
    }
  }
  return {{"tokens_per_step", batch * length},
          {"rounds", rounds},
          {"float32_tokens_per_s", batch * length * rounds / seconds[0]},
          {"autocast_bf16_tokens_per_s", batch * length * rounds / seconds[1]},
          {"speedup_autocast_bf16", seconds[0] / seconds[1]},
          {"first_loss_float32", first_loss[0]},
          {"first_loss_autocast_bf16", first_loss[1]}};
}

int64_t MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// A training step's forward and backward on sequences of agent-episode
// lengths (235 to 637 tokens, ~4096 in all: one micro-batch), with freed CPU
// blocks given back to the system (cap 0) and kept for reuse, alternating
// per round; each timed step follows an untimed one in the same mode.
json TrainStepCpuCache(model::Transformer& m, int rounds) {
  std::vector<std::vector<int64_t>> seqs;
  int64_t tokens = 0;
  for (int64_t b = 0; tokens < 4096; ++b) {
    seqs.push_back(Prompt(235 + (b * 151) % 403, b, m.config().vocab_size));
    tokens += static_cast<int64_t>(seqs.back().size());
  }
  const model::PackedBatch packed = model::TeacherForcingBatch(seqs);
  m.SetRequiresGrad(true);
  auto step = [&] {
    for (at::Tensor& p : m.Parameters()) p.mutable_grad() = at::Tensor();
    (-m.Score(packed)->logprobs.sum() / tokens).backward();
  };
  const int64_t default_cap = config::RunSection{}.cpu_cache_mib << 20;
  double seconds[2] = {0, 0};
  int64_t faults[2] = {0, 0};
  for (int r = 0; r < rounds; ++r) {
    for (int cached : {0, 1}) {
      model::UseCachingCpuAllocator(cached ? default_cap : 0);
      step();
      const int64_t faults_before = MinorFaults();
      Clock::time_point start = Clock::now();
      step();
      seconds[cached] += Since(start);
      faults[cached] += MinorFaults() - faults_before;
    }
  }
  model::UseCachingCpuAllocator(default_cap);
  m.SetRequiresGrad(false);
  return {{"tokens_per_step", tokens},
          {"sequences", seqs.size()},
          {"rounds", rounds},
          {"cache_off_tokens_per_s", tokens * rounds / seconds[0]},
          {"cache_on_tokens_per_s", tokens * rounds / seconds[1]},
          {"speedup_cpu_cache", seconds[0] / seconds[1]},
          {"minor_faults_per_step_off", faults[0] / rounds},
          {"minor_faults_per_step_on", faults[1] / rounds}};
}

// GFLOP/s of an [m, k] x [k, n] matmul, best of a few runs.
double MatmulGflops(int64_t m, int64_t k, int64_t n, int reps) {
  at::Tensor a = at::randn({m, k}), b = at::randn({k, n});
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Clock::time_point start = Clock::now();
    at::Tensor c = at::matmul(a, b);
    best = std::min(best, Since(start));
  }
  return 2.0 * m * k * n / best / 1e9;
}

// Seconds of the GEMMs of one decode step at `batch` (all layers + lm_head).
double DecodeGemmSeconds(const model::ModelConfig& c, int64_t batch) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim;
  const int64_t kv = c.num_key_value_heads * c.head_dim, i = c.intermediate_size;
  std::vector<std::pair<int64_t, int64_t>> shapes = {{h, q}, {h, kv}, {h, kv}, {q, h},
                                                     {h, i}, {h, i},  {i, h}};
  at::Tensor x = at::randn({batch, std::max(h, i)});
  std::vector<at::Tensor> weights;
  for (auto [in, out] : shapes) weights.push_back(at::randn({out, in}));
  at::Tensor head = at::randn({c.vocab_size, h});
  double best = 1e30;
  for (int r = 0; r < 20; ++r) {
    Clock::time_point start = Clock::now();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      for (size_t w = 0; w < shapes.size(); ++w) {
        at::linear(x.narrow(1, 0, shapes[w].first), weights[w]);
      }
    }
    at::linear(x.narrow(1, 0, h), head);
    best = std::min(best, Since(start));
  }
  return best;
}

struct ModelBenchOptions {
  bool json_only = false;
  bool quick = false;
  int threads = 0;
};

int RunBench(const ModelBenchOptions& o) {
  const int threads =
      o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  SetComputeThreads(threads);
  model::ModelConfig config = model::SpeedBenchmarkConfig();
  auto m = model::Transformer::RandomInit(config, 0, {});
  json r = {{"model", {{"arch", "llama"}, {"parameters", m->NumParameters()}}},
            {"threads", threads}};
  const int64_t prompt = 16, steps = o.quick ? 8 : 64;
  json kv;
  for (int64_t batch : {1, 8, 64}) {
    std::string key = "batch_" + std::to_string(batch);
    r["decode_tokens_per_s"]["kv_cache"][key] =
        DecodeWithCache(*m, batch, prompt, steps, batch == 64 ? &kv : nullptr);
    r["decode_tokens_per_s"]["recompute"][key] =
        DecodeByRecompute(*m, batch, prompt, o.quick ? 2 : 8);
  }
  r["kv_memory"] = kv;
  r["prefill_tokens_per_s"] = PrefillTokensPerSecond(*m, 8, 256);
  r["train_tokens_per_s"] = TrainTokensPerSecond(*m, 8, 256, o.quick ? 1 : 3);
  r["train_step_cpu_cache"] = TrainStepCpuCache(*m, o.quick ? 1 : 3);
  r["train_autocast"] = TrainAutocast(config, 8, 256, o.quick ? 1 : 3);
  const double gemm = DecodeGemmSeconds(config, 64);
  r["roofline"] = {{"matmul_gflops_1024", MatmulGflops(1024, 1024, 1024, 5)},
                   {"matmul_gflops_decode_64x512x1408", MatmulGflops(64, 512, 1408, 20)},
                   {"decode_gemm_bound_tokens_per_s_batch_64", 64 / gemm}};
  r["decode_batch_64_fraction_of_gemm_bound"] =
      r["decode_tokens_per_s"]["kv_cache"]["batch_64"].get<double>() * gemm / 64;
  if (!o.json_only) std::cout << r.dump(2) << "\n";
  std::cout << r.dump() << "\n";
  return kExitOk;
}

void SetupBenchModel(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto o = std::make_shared<ModelBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "model", "Decode / prefill / training throughput of the ~18M Llama, KV bytes, roofline");
  cmd->add_flag("--json", o->json_only, "Print only the JSON line");
  cmd->add_flag("--quick", o->quick, "Fewer steps (a smoke test, not a measurement)");
  cmd->add_option("--threads", o->threads, "Intra-op CPU threads (0 = all cores)");
  cmd->callback([o, &context] { context.exit_code = RunBench(*o); });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench-model", SetupBenchModel);

}  // namespace loom::cli
