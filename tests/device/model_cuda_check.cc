// model_cuda_check: src/model on a CUDA device (the CPU when there is none),
// built by scripts/device/cuda_check.sh against the machine's LibTorch.
//   1. For every arch, incremental decode over the paged KV cache (prefill
//      chunks, then one token at a time, mixed lengths crossing blocks) gives
//      the full forward's log-probs: float32 within 1e-4, bfloat16 reported
//      (and held to a loose bound).
//   2. Tokens/s of the ~18M Llama of TARGETS.md in bfloat16 (float32 on the
//      CPU): decode with the KV cache at batch 1/8/64, prefill, a training step.
// Usage: model_cuda_check [--out FILE] [--quick]. Writes one JSON object to
// FILE and stdout; exits 1 when a correctness check fails.

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>

#include <torch/cuda.h>
#include <torch/optim/adamw.h>
#include <torch/version.h>
#include <nlohmann/json.hpp>

#include "loom/model/transformer.h"
#include "model/test_models.h"

namespace loom::model {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

void Sync(at::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

std::vector<std::vector<int64_t>> Sequences(const std::vector<int64_t>& lengths, int64_t vocab) {
  std::mt19937 gen(3);
  std::vector<std::vector<int64_t>> out;
  for (int64_t n : lengths) {
    std::vector<int64_t> s(n);
    for (auto& t : s) t = static_cast<int64_t>(gen() % vocab);
    out.push_back(s);
  }
  return out;
}

// Full-forward log-probs of every position: [n, vocab] float32 on the CPU.
at::Tensor FullLogprobs(const Transformer& m, const std::vector<int64_t>& seq) {
  ScoreOptions options;
  options.full_vocab_rows = at::arange(static_cast<int64_t>(seq.size()), at::kLong);
  return m.Score(TeacherForcingBatch({seq}), options)->full_logprobs.cpu();
}

// Max |incremental - full| log-prob over every decoded position of every sample.
double IncrementalVsFull(const Transformer& m) {
  at::NoGradGuard no_grad;
  auto seqs = Sequences({5, 13, 9, 21}, m.config().vocab_size);
  KvBlockPool pool(m.PoolOptions(/*max_tokens=*/256, /*block_size=*/4));
  std::vector<KvSequence> kv(seqs.size());
  const std::vector<int64_t> prompt = {3, 6, 1, 9};
  std::vector<std::vector<at::Tensor>> rows(seqs.size());
  for (bool first = true;; first = false) {
    std::vector<StepInput> batch;
    std::vector<size_t> who;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int64_t done = kv[s].length, n = first ? prompt[s] : 1;
      if (done + n > static_cast<int64_t>(seqs[s].size())) continue;
      batch.push_back({&kv[s], {seqs[s].begin() + done, seqs[s].begin() + done + n}});
      who.push_back(s);
    }
    if (batch.empty()) break;
    auto result = m.Step(batch, pool);
    if (!result.ok()) throw std::runtime_error(std::string(result.status().message()));
    at::Tensor lp = at::log_softmax(result->logits, -1).cpu();
    for (size_t i = 0; i < who.size(); ++i) rows[who[i]].push_back(lp[i]);
  }
  double worst = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    at::Tensor inc = at::stack(rows[s]);
    at::Tensor full = FullLogprobs(m, seqs[s]).narrow(0, prompt[s] - 1, inc.size(0));
    worst = std::max(worst, (inc - full).abs().max().item<double>());
  }
  return worst;
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

json Speed(const Transformer& m, bool quick) {
  const at::Device device = m.device();
  const int64_t prompt = 16, steps = quick ? 8 : 64, vocab = m.config().vocab_size;
  json r;
  for (int64_t batch : {1, 8, 64}) {
    KvBlockPool pool(m.PoolOptions(batch * (prompt + steps + 16), 16));
    std::vector<KvSequence> seqs(batch);
    std::vector<StepInput> in(batch);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<int64_t> p;
      for (int64_t i = 0; i < prompt; ++i) p.push_back((b * 131 + i * 7919) % vocab);
      in[b] = {&seqs[b], p};
    }
    auto out = m.Step(in, pool);
    Sync(device);
    Clock::time_point start = Clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      at::Tensor next = out->logits.argmax(-1).cpu();
      for (int64_t b = 0; b < batch; ++b) in[b].tokens = {next[b].item<int64_t>()};
      out = m.Step(in, pool);
    }
    Sync(device);
    r["decode_tokens_per_s"]["batch_" + std::to_string(batch)] = batch * steps / Seconds(start);
  }
  std::vector<std::vector<int64_t>> seqs = Sequences(std::vector<int64_t>(8, 256), vocab);
  {
    KvBlockPool pool(m.PoolOptions(8 * 256 + 64, 16));
    std::vector<KvSequence> kv(8);
    std::vector<StepInput> in;
    for (int b = 0; b < 8; ++b) in.push_back({&kv[b], seqs[b]});
    Sync(device);
    Clock::time_point start = Clock::now();
    (void)m.Step(in, pool);
    Sync(device);
    r["prefill_tokens_per_s"] = 8 * 256 / Seconds(start);
  }
  return r;
}

double TrainTokensPerSecond(Transformer& m, bool quick) {
  const at::Device device = m.device();
  m.SetRequiresGrad(true);
  torch::optim::AdamW opt(m.Parameters(), torch::optim::AdamWOptions(1e-4));
  PackedBatch packed =
      TeacherForcingBatch(Sequences(std::vector<int64_t>(8, 256), m.config().vocab_size));
  const int steps = quick ? 1 : 5;
  double seconds = 0;
  for (int s = 0; s <= steps; ++s) {  // step 0 warms up
    Sync(device);
    Clock::time_point start = Clock::now();
    opt.zero_grad();
    at::Tensor loss = -m.Score(packed)->logprobs.sum() / (8 * 256);
    loss.backward();
    opt.step();
    Sync(device);
    if (s > 0) seconds += Seconds(start);
  }
  m.SetRequiresGrad(false);
  return 8 * 256 * steps / seconds;
}

int Run(const std::string& out_path, bool quick) {
  const bool cuda = torch::cuda::is_available();
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  json r = {{"device", cuda ? "cuda" : "cpu"},
            {"torch_version", TORCH_VERSION},
            {"torch_version_major", TORCH_VERSION_MAJOR}};
  bool ok = true;
  for (const std::string& arch : testing::AllArchs()) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      const bool f32 = dtype == at::kFloat;
      LoadOptions options;
      options.dtype = dtype;
      options.device = device;
      auto m = testing::TestModel(testing::TestConfig(arch), 7, options);
      const double diff = IncrementalVsFull(*m);
      const double bound = f32 ? 1e-4 : 0.25;
      ok = ok && diff <= bound;
      r["incremental_vs_full"][arch][f32 ? "float32" : "bfloat16"] = {
          {"max_abs_logprob_diff", diff}, {"bound", bound}, {"ok", diff <= bound}};
    }
  }
  LoadOptions bench;
  bench.dtype = cuda ? at::kBFloat16 : at::kFloat;
  bench.device = device;
  auto m = Transformer::RandomInit(SpeedBenchmarkConfig(), 0, bench);
  json speed = Speed(*m, quick);
  speed["train_tokens_per_s"] = TrainTokensPerSecond(*m, quick);
  speed["dtype"] = cuda ? "bfloat16" : "float32";
  speed["parameters"] = m->NumParameters();
  r["speed"] = speed;
  r["ok"] = ok;
  std::cout << r.dump(2) << "\n";
  if (!out_path.empty()) std::ofstream(out_path) << r.dump(2) << "\n";
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace loom::model

int main(int argc, char** argv) {
  std::string out;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) out = argv[++i];
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
  }
  try {
    return loom::model::Run(out, quick);
  } catch (const std::exception& e) {
    std::cerr << "model_cuda_check: " << e.what() << "\n";
    return 2;
  }
}
