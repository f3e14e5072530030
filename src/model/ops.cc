// Forward building blocks (RMSNorm, RoPE, GQA attention, SwiGLU, MoE).

#include "ops.h"

#include <ATen/core/grad_mode.h>
#include <cmath>

namespace loom::model {

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (x.size(0) != 1 || x.dim() != 2 || !x.device().is_cpu() || at::GradMode::is_enabled()) {
    return at::linear(x, w, b);
  }
  at::Tensor row = x.select(0, 0);
  return (b.defined() ? at::addmv(b, w, row) : at::mv(w, row)).unsqueeze(0);
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

std::pair<at::Tensor, at::Tensor> RopeTables(const at::Tensor& positions, int64_t head_dim,
                                             double theta, at::ScalarType dtype) {
  auto f32 = at::TensorOptions().dtype(at::kFloat).device(positions.device());
  at::Tensor exponent = at::arange(0, head_dim, 2, f32.dtype(at::kLong)).to(at::kFloat) / head_dim;
  at::Tensor inv_freq = 1.0 / at::pow(theta, exponent);                              // [hd/2]
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);  // [T, hd/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);                                      // [T, hd]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  at::Tensor rotated = at::cat({-x2, x1}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask) {
  const int64_t b = q.size(0), nq = q.size(1), nh = q.size(2), hd = q.size(3);
  const int64_t s = k.size(1), kvh = k.size(2), g = nh / kvh;
  // Group the query heads that share a KV head: [B, kvh, g*Nq, hd]. Scaling q
  // here touches hd values per query where scaling the scores touches S.
  at::Tensor qg = (q * (1.0 / std::sqrt(static_cast<double>(hd))))
                      .view({b, nq, kvh, g, hd})
                      .permute({0, 2, 3, 1, 4})
                      .reshape({b, kvh, g * nq, hd});
  // [B, kvh, S, hd] contiguous, so K^T is a view matmul needs no copy of.
  at::Tensor kt = k.permute({0, 2, 1, 3}).contiguous().transpose(2, 3);  // [B, kvh, hd, S]
  at::Tensor vt = v.permute({0, 2, 1, 3});                               // [B, kvh, S, hd]
  at::Tensor scores = at::matmul(qg, kt);                                // [B, kvh, g*Nq, S]
  scores.view({b, kvh, g, nq, s}).add_(mask.view({b, 1, 1, nq, s}));
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  at::Tensor out = at::matmul(probs, vt);  // [B, kvh, g*Nq, hd]
  return out.view({b, kvh, g, nq, hd}).permute({0, 3, 1, 2, 4}).reshape({b, nq, nh, hd});
}

at::Tensor Mlp(const MlpWeights& w, const at::Tensor& x) {
  std::vector<at::Tensor> gate_up = ProjectGateUp(w, x);  // [T, I] each
  at::Tensor gate = gate_up[0], up = gate_up[1];
  // Without autograd nothing needs the pre-activations: work in place.
  at::Tensor hidden = at::GradMode::is_enabled() ? at::silu(gate) * up : at::silu_(gate).mul_(up);
  return Linear(hidden, w.down);
}

at::Tensor MoeBlock(const LayerWeights& w, const ModelConfig& config, const at::Tensor& x,
                    const at::Tensor& replay, at::Tensor* chosen) {
  const int64_t k = config.num_experts_per_tok, e_count = config.num_experts;
  at::Tensor probs = at::softmax(Linear(x, w.router), -1, at::kFloat);              // [T, E]
  at::Tensor experts = replay.defined() ? replay : std::get<1>(probs.topk(k, -1));  // [T, k]
  at::Tensor gates = probs.gather(1, experts);                                      // [T, k]
  if (config.norm_topk_prob) gates = gates / gates.sum(-1, /*keepdim=*/true);
  gates = gates.to(x.scalar_type());
  if (chosen != nullptr) *chosen = experts;
  // Sort the (token, slot) pairs by expert so each expert sees one slice.
  at::Tensor flat = experts.reshape({-1});
  at::Tensor order = flat.argsort();
  at::Tensor counts = at::bincount(flat, {}, e_count).cpu();
  at::Tensor tokens = at::div(order, k, "floor");
  at::Tensor flat_gates = gates.reshape({-1}).index_select(0, order);
  at::Tensor rows = x.index_select(0, tokens);  // [T*k, H]
  std::vector<at::Tensor> outs;
  int64_t begin = 0;
  const int64_t* count = counts.data_ptr<int64_t>();
  for (int64_t e = 0; e < e_count; ++e) {
    if (count[e] == 0) continue;
    at::Tensor slice = rows.narrow(0, begin, count[e]);
    outs.push_back(Mlp(w.experts[e], slice) * flat_gates.narrow(0, begin, count[e]).unsqueeze(1));
    begin += count[e];
  }
  at::Tensor out = at::zeros_like(x);
  if (outs.empty()) return out;
  return out.index_add(0, tokens, at::cat(outs));
}

}  // namespace loom::model
