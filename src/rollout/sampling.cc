// Sampling: log-softmax in double, then optional top-k / top-p truncation and
// one inverse-CDF draw.

#include "loom/rollout/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "loom/base/random.h"

namespace loom::rollout {
namespace {

// log_softmax(logits / temperature) in double.  -> [vocab]
std::vector<double> LogSoftmax(const float* logits, int64_t vocab, double temperature) {
  std::vector<double> out(vocab);
  double max_value = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    out[i] = static_cast<double>(logits[i]) / temperature;
    max_value = std::max(max_value, out[i]);
  }
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(out[i] - max_value);
  const double log_norm = max_value + std::log(sum);
  for (double& v : out) v -= log_norm;
  return out;
}

int64_t ArgMax(const std::vector<double>& values) {
  return std::max_element(values.begin(), values.end()) - values.begin();
}

// Token ids kept by top-k / top-p, most likely first (ties: lower id first).
std::vector<int64_t> Candidates(const std::vector<double>& logp, const SamplingParams& params) {
  const int64_t vocab = static_cast<int64_t>(logp.size());
  std::vector<int64_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  const bool truncate = (params.top_k > 0 && params.top_k < vocab) || params.top_p < 1.0;
  if (!truncate) return ids;
  const int64_t k = params.top_k > 0 ? std::min(params.top_k, vocab) : vocab;
  auto by_prob = [&](int64_t a, int64_t b) {
    return logp[a] > logp[b] || (logp[a] == logp[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_prob);
  ids.resize(k);
  if (params.top_p < 1.0) {
    double mass = 0.0;
    size_t keep = 0;
    while (keep < ids.size() && (keep == 0 || mass < params.top_p))
      mass += std::exp(logp[ids[keep++]]);
    ids.resize(keep);
  }
  return ids;
}

}  // namespace

SampleRng::SampleRng(uint64_t run_seed, uint64_t sample_id)
    : key_(Mix64(Mix64(run_seed) ^ sample_id)) {}

SampleRng SampleRng::FromState(uint64_t key, uint64_t counter) {
  SampleRng rng;
  rng.key_ = key;
  rng.counter_ = counter;
  return rng;
}

double SampleRng::NextUniform() { return UnitInterval(Mix64(key_ ^ Mix64(counter_++))); }

SampledToken SampleToken(const float* logits, int64_t vocab, const SamplingParams& params,
                         SampleRng& rng) {
  const bool greedy = params.temperature <= 0.0;
  const std::vector<double> logp = LogSoftmax(logits, vocab, params.LogprobTemperature());
  if (greedy) {
    const int64_t token = ArgMax(logp);
    return {token, static_cast<float>(logp[token])};
  }
  const std::vector<int64_t> ids = Candidates(logp, params);
  double total = 0.0;
  for (int64_t id : ids) total += std::exp(logp[id]);
  const double target = rng.NextUniform() * total;
  double cumulative = 0.0;
  int64_t token = ids.back();
  for (int64_t id : ids) {
    cumulative += std::exp(logp[id]);
    if (target < cumulative) {
      token = id;
      break;
    }
  }
  return {token, static_cast<float>(logp[token])};
}

}  // namespace loom::rollout
