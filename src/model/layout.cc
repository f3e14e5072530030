#include "layout.h"

#include <algorithm>
#include <limits>

namespace loom::model {

PaddedLayout MakeLayout(const std::vector<int64_t>& new_tokens, const std::vector<int64_t>& cached,
                        at::Device device) {
  PaddedLayout layout;
  layout.batch = static_cast<int64_t>(new_tokens.size());
  int64_t total = 0;
  for (int64_t n : new_tokens) {
    layout.max_q = std::max(layout.max_q, n);
    total += n;
  }
  std::vector<int64_t> pad(layout.batch * layout.max_q, total), unpad(total), start(cached),
      keys(layout.batch);
  int64_t max_keys = 0;
  for (int64_t b = 0; b < layout.batch; ++b) {
    max_keys = std::max(max_keys, cached[b] + new_tokens[b]);
  }
  at::Tensor mask = at::full({layout.batch, layout.max_q, max_keys},
                             -std::numeric_limits<float>::infinity(), at::kFloat);
  float* m = mask.data_ptr<float>();
  int64_t row = 0;
  for (int64_t b = 0; b < layout.batch; ++b) {
    for (int64_t i = 0; i < new_tokens[b]; ++i, ++row) {
      pad[b * layout.max_q + i] = row;
      unpad[row] = b * layout.max_q + i;
    }
    // Padding queries (i >= new_tokens[b]) see the sample's keys too, so no
    // softmax row is all -inf (its NaN would leak into gradients).
    for (int64_t i = 0; i < layout.max_q; ++i) {
      const int64_t visible = std::min(cached[b] + i + 1, cached[b] + new_tokens[b]);
      std::fill_n(m + (b * layout.max_q + i) * max_keys, visible, 0.0f);
    }
    keys[b] = cached[b] + new_tokens[b];
  }
  auto to = [&](const std::vector<int64_t>& v) { return at::tensor(v, at::kLong).to(device); };
  layout.pad_index = to(pad);
  layout.unpad_index = to(unpad);
  layout.q_start = to(start);
  layout.key_len = to(keys);
  layout.mask = mask.to(device);
  return layout;
}

at::Tensor Pad(const at::Tensor& rows, const PaddedLayout& layout) {
  std::vector<int64_t> zero_shape = rows.sizes().vec();
  zero_shape[0] = 1;
  at::Tensor with_zero = at::cat({rows, at::zeros(zero_shape, rows.options())});
  std::vector<int64_t> shape = rows.sizes().vec();
  shape[0] = layout.max_q;
  shape.insert(shape.begin(), layout.batch);
  return with_zero.index_select(0, layout.pad_index).view(shape);
}

at::Tensor Unpad(const at::Tensor& padded, const PaddedLayout& layout) {
  return padded.flatten(0, 1).index_select(0, layout.unpad_index);
}

}  // namespace loom::model
