// Token sampling: the generator, greedy, truncation, and the behaviour log-prob.

#include <cmath>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "loom/rollout/sampling.h"

namespace loom::rollout {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 0.5f, 2.5f, -1.0f, 2.9f};

double LogSoftmaxAt(const std::vector<float>& logits, double temperature, int64_t token) {
  double z = 0;
  for (float l : logits) z += std::exp(l / temperature);
  return logits[token] / temperature - std::log(z);
}

std::map<int64_t, int> Histogram(const SamplingParams& params, int draws) {
  SampleRng rng(42, 7);
  std::map<int64_t, int> counts;
  for (int i = 0; i < draws; ++i) {
    ++counts[SampleToken(kLogits.data(), kLogits.size(), params, rng).token];
  }
  return counts;
}

TEST(SampleRngTest, StreamIsAFunctionOfSeedIdAndCounter) {
  SampleRng a(1, 2), b(1, 2), c(1, 3);
  for (int i = 0; i < 5; ++i) a.NextUniform();
  SampleRng resumed = SampleRng::FromState(a.key(), a.counter());
  for (int i = 0; i < 5; ++i) b.NextUniform();
  const double next = a.NextUniform();
  EXPECT_EQ(next, b.NextUniform());
  EXPECT_EQ(next, resumed.NextUniform());
  EXPECT_NE(SampleRng(1, 2).NextUniform(), c.NextUniform());
}

TEST(SampleRngTest, UniformsAreInRangeAndSpread) {
  SampleRng rng(0, 0);
  double sum = 0;
  for (int i = 0; i < 20000; ++i) {
    const double u = rng.NextUniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 20000, 0.5, 0.01);
}

TEST(SampleTokenTest, GreedyTakesArgmaxWithoutDrawing) {
  SampleRng rng(0, 0);
  SamplingParams greedy;
  greedy.temperature = 0;
  SampledToken t = SampleToken(kLogits.data(), kLogits.size(), greedy, rng);
  EXPECT_EQ(t.token, 1);
  EXPECT_NEAR(t.logprob, LogSoftmaxAt(kLogits, 1.0, 1), 1e-6);
  EXPECT_EQ(rng.counter(), 0u);
}

TEST(SampleTokenTest, FrequenciesFollowTheTemperedDistribution) {
  SamplingParams params;
  params.temperature = 0.7;
  const int draws = 40000;
  auto counts = Histogram(params, draws);
  for (int64_t token = 0; token < 6; ++token) {
    const double p = std::exp(LogSoftmaxAt(kLogits, 0.7, token));
    EXPECT_NEAR(counts[token] / double(draws), p, 4 * std::sqrt(p * (1 - p) / draws) + 1e-3);
  }
}

TEST(SampleTokenTest, TopKKeepsOnlyTheKMostLikely) {
  SamplingParams params;
  params.top_k = 2;
  auto counts = Histogram(params, 5000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[5], 0);
}

TEST(SampleTokenTest, TopPKeepsTheSmallestSetWithTheMass) {
  // Probabilities (T=1): token 1 ~0.35, 5 ~0.32, 3 ~0.21: the first two hold
  // < 0.7, so top_p = 0.7 keeps three tokens.
  SamplingParams params;
  params.top_p = 0.7;
  auto counts = Histogram(params, 5000);
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_TRUE(counts.count(1) && counts.count(5) && counts.count(3));
}

TEST(SampleTokenTest, LogprobIsBeforeTruncation) {
  SamplingParams params;
  params.temperature = 2.0;
  params.top_k = 1;
  SampleRng rng(0, 0);
  SampledToken t = SampleToken(kLogits.data(), kLogits.size(), params, rng);
  EXPECT_EQ(t.token, 1);
  EXPECT_NEAR(t.logprob, LogSoftmaxAt(kLogits, 2.0, 1), 1e-6);  // not 0 = log(1)
}

}  // namespace
}  // namespace loom::rollout
