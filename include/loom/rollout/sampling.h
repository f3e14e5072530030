#pragma once
// Token sampling for the rollout engine: greedy, temperature, top-k and top-p,
// driven by a per-sample counter-based generator.
//
// SampleRng is seeded from (run seed, sample id) and its whole state is two
// integers, so a sample's draws never depend on which other samples share
// its batch, and exporting / importing a sample reproduces them bit-exactly.
//
// The behaviour log-prob of a sampled token is log_softmax(logits / T) at that
// token over the full vocabulary, before top-k/top-p truncation (T = 1 for
// greedy): the quantity the trainer recomputes for importance ratios.
// Plain functions and a value type; thread-safe.

#include <cstdint>

#include <ATen/ATen.h>

namespace loom::rollout {

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy (argmax, lowest id on ties)
  double top_p = 1.0;        // keep the smallest most-likely set with mass >= top_p
  int64_t top_k = 0;         // keep the top_k most likely tokens; 0 = all

  // The T of the behaviour log-probs: the temperature, or 1 when greedy.
  double LogprobTemperature() const { return temperature > 0.0 ? temperature : 1.0; }
};

// A splitmix64 stream: draw n is a pure function of (key, n).
class SampleRng {
 public:
  SampleRng() = default;
  SampleRng(uint64_t run_seed, uint64_t sample_id);
  static SampleRng FromState(uint64_t key, uint64_t counter);

  // Uniform in [0, 1) with 53 random bits; advances the counter.
  double NextUniform();

  uint64_t key() const { return key_; }
  uint64_t counter() const { return counter_; }

 private:
  uint64_t key_ = 0;
  uint64_t counter_ = 0;
};

struct SampledToken {
  int64_t token = 0;
  float logprob = 0.0f;  // behaviour log-prob (see the file comment)
};

// Samples one token from `logits`: [vocab] float32, contiguous, on the CPU.
// Greedy draws no random number; otherwise exactly one draw per call.
SampledToken SampleToken(const float* logits, int64_t vocab, const SamplingParams& params,
                         SampleRng& rng);

}  // namespace loom::rollout
