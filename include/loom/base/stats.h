#pragma once
// Small statistics shared by the evaluators and the task ledger.

#include <cmath>
#include <utility>
#include <vector>

namespace loom {

// The mean of `values` and its standard error, sd / √n with the n - 1
// denominator (0 for fewer than two values).
inline std::pair<double, double> MeanAndStderr(const std::vector<double>& values) {
  const double n = static_cast<double>(values.size());
  if (values.empty()) return {0.0, 0.0};
  double mean = 0;
  for (double v : values) mean += v;
  mean /= n;
  if (values.size() < 2) return {mean, 0.0};
  double squares = 0;
  for (double v : values) squares += (v - mean) * (v - mean);
  return {mean, std::sqrt(squares / (n - 1) / n)};
}

}  // namespace loom
