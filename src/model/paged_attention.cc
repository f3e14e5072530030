// PagedDecodeAttention: one query per sample against its paged K/V.

#include "paged_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/Parallel.h>

namespace loom::model {
namespace {

struct Shape {
  int64_t heads, kv_heads, head_dim, block_size, table_stride;
};

// Scratch space of one worker, reused across the groups it handles.
struct Scratch {
  std::vector<float> query, scores, acc;
};

// q . k with eight independent partial sums, which the compiler can keep in
// vector lanes (one serial float sum cannot be reordered, so never vectorizes).
template <typename T>
float Dot(const float* q, const T* k, int64_t n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    for (int j = 0; j < 8; ++j) part[j] += q[d + j] * static_cast<float>(k[d + j]);
  }
  float sum = 0.0f;
  for (; d < n; ++d) sum += q[d] * static_cast<float>(k[d]);
  for (int j = 0; j < 8; ++j) sum += part[j];
  return sum;
}

// Attention of the `group` query heads that share KV head `h` of sample `b`.
template <typename T>
void AttendOneGroup(const T* q, const T* key, const T* value, const int32_t* table, int64_t keys,
                    int64_t b, int64_t h, const Shape& s, Scratch& scratch, T* out) {
  const int64_t hd = s.head_dim, group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  scratch.query.resize(group * hd);
  scratch.scores.resize(group * keys);
  scratch.acc.assign(group * hd, 0.0f);
  float* query = scratch.query.data();
  float* scores = scratch.scores.data();
  float* acc = scratch.acc.data();
  const T* q_rows = q + (b * s.heads + h * group) * hd;
  for (int64_t i = 0; i < group * hd; ++i) query[i] = static_cast<float>(q_rows[i]) * scale;
  auto row = [&](const T* pool, int64_t t) {
    const int64_t slot =
        static_cast<int64_t>(table[t / s.block_size]) * s.block_size + t % s.block_size;
    return pool + (slot * s.kv_heads + h) * hd;
  };
  for (int64_t t = 0; t < keys; ++t) {
    const T* k = row(key, t);
    for (int64_t g = 0; g < group; ++g) scores[g * keys + t] = Dot(query + g * hd, k, hd);
  }
  for (int64_t g = 0; g < group; ++g) {
    float* sg = scores + g * keys;
    const float max = *std::max_element(sg, sg + keys);
    float sum = 0.0f;
    for (int64_t t = 0; t < keys; ++t) sum += (sg[t] = std::exp(sg[t] - max));
    for (int64_t t = 0; t < keys; ++t) sg[t] /= sum;
  }
  for (int64_t t = 0; t < keys; ++t) {
    const T* v = row(value, t);
    for (int64_t g = 0; g < group; ++g) {
      const float p = scores[g * keys + t];
      float* ag = acc + g * hd;
      for (int64_t d = 0; d < hd; ++d) ag[d] += p * static_cast<float>(v[d]);
    }
  }
  T* out_rows = out + (b * s.heads + h * group) * hd;
  for (int64_t i = 0; i < group * hd; ++i) out_rows[i] = static_cast<T>(acc[i]);
}

template <typename T>
void Attend(const at::Tensor& q, const at::Tensor& key, const at::Tensor& value,
            const at::Tensor& table, const at::Tensor& key_len, const Shape& s, at::Tensor& out) {
  const T* qp = q.data_ptr<T>();
  const T* kp = key.data_ptr<T>();
  const T* vp = value.data_ptr<T>();
  const int32_t* tp = table.data_ptr<int32_t>();
  const int64_t* lp = key_len.data_ptr<int64_t>();
  T* op = out.data_ptr<T>();
  const int64_t batch = q.size(0);
  at::parallel_for(0, batch * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / s.kv_heads, h = i % s.kv_heads;
      AttendOneGroup<T>(qp, kp, vp, tp + b * s.table_stride, lp[b], b, h, s, scratch, op);
    }
  });
}

}  // namespace

bool PagedDecodeAttentionSupports(at::Device device, at::ScalarType dtype) {
  return device.is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16);
}

at::Tensor PagedDecodeAttention(const at::Tensor& q, const at::Tensor& key, const at::Tensor& value,
                                const at::Tensor& block_table, const at::Tensor& key_len) {
  TORCH_INTERNAL_ASSERT(PagedDecodeAttentionSupports(q.device(), q.scalar_type()) &&
                        key.is_contiguous() && value.is_contiguous() &&
                        block_table.scalar_type() == at::kInt &&
                        key_len.scalar_type() == at::kLong);
  at::Tensor qc = q.contiguous(), table = block_table.contiguous();
  at::Tensor out = at::empty_like(qc);
  const Shape shape{q.size(1), key.size(2), q.size(2), key.size(1), table.size(1)};
  if (q.scalar_type() == at::kFloat) {
    Attend<float>(qc, key, value, table, key_len, shape, out);
  } else {
    Attend<at::BFloat16>(qc, key, value, table, key_len, shape, out);
  }
  return out;
}

}  // namespace loom::model
