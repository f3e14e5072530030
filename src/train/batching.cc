#include "loom/train/batching.h"

namespace loom::train {

std::vector<std::vector<size_t>> SplitByTokens(const std::vector<int64_t>& lengths,
                                               int64_t max_tokens) {
  std::vector<std::vector<size_t>> groups;
  int64_t tokens = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (groups.empty() || (tokens + lengths[i] > max_tokens && tokens > 0)) {
      groups.emplace_back();
      tokens = 0;
    }
    groups.back().push_back(i);
    tokens += lengths[i];
  }
  return groups;
}

namespace {

template <class Out, class T>
at::Tensor Shift(const std::vector<const std::vector<T>*>& values, at::ScalarType dtype) {
  int64_t total = 0;
  for (const auto* v : values) total += static_cast<int64_t>(v->size());
  at::Tensor out = at::zeros({total}, dtype);
  Out* data = out.data_ptr<Out>();
  int64_t offset = 0;
  for (const auto* v : values) {
    const int64_t n = static_cast<int64_t>(v->size());
    for (int64_t t = 0; t + 1 < n; ++t) data[offset + t] = static_cast<Out>((*v)[t + 1]);
    offset += n;
  }
  return out;
}

}  // namespace

ShiftedBatch TeacherForcing(const std::vector<const std::vector<int64_t>*>& sequences,
                            const std::vector<const std::vector<uint8_t>*>& per_token) {
  std::vector<std::vector<int64_t>> copies;
  copies.reserve(sequences.size());
  for (const auto* s : sequences) copies.push_back(*s);
  ShiftedBatch shifted;
  shifted.batch = model::TeacherForcingBatch(copies);
  shifted.target_weight = Shift<float>(per_token, at::kFloat);
  return shifted;
}

at::Tensor ShiftedValues(const std::vector<const std::vector<float>*>& values) {
  return Shift<float>(values, at::kFloat);
}

at::Tensor ShiftedValues(const std::vector<const std::vector<int64_t>*>& values) {
  return Shift<int64_t>(values, at::kLong);
}

}  // namespace loom::train
