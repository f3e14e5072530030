#include "forward.h"

#include "loom/model/batch.h"
#include "ops.h"

namespace loom::model {
namespace {

at::Tensor SelfAttention(const ModelConfig& c, const LayerWeights& w, int64_t layer,
                         const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                         const StackInput& input) {
  const int64_t t = x.size(0), hd = c.head_dim;
  std::vector<at::Tensor> parts = ProjectQkv(w, x);
  at::Tensor q = parts[0].view({t, c.num_attention_heads, hd});
  at::Tensor k = parts[1].view({t, c.num_key_value_heads, hd});
  at::Tensor v = parts[2].view({t, c.num_key_value_heads, hd});
  if (w.q_norm.defined()) {
    q = RmsNorm(q, w.q_norm, c.rms_norm_eps);
    k = RmsNorm(k, w.k_norm, c.rms_norm_eps);
  }
  q = ApplyRope(q, cos, sin);
  k = ApplyRope(k, cos, sin);
  at::Tensor out = input.attention(layer, q, k, v);
  return Linear(out.reshape({t, -1}), w.o, w.o_bias);
}

}  // namespace

at::Tensor PaddedAttention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                           const PaddedLayout& layout) {
  return Unpad(Attention(Pad(q, layout), keys, values, layout.mask), layout);
}

at::Tensor RunStack(const ModelConfig& c, const ModelWeights& w, const StackInput& input,
                    at::Tensor* routing) {
  at::Tensor x = at::embedding(w.embed, input.tokens);  // [T, H]
  auto [cos, sin] = RopeTables(input.positions, c.head_dim, c.rope_theta, x.scalar_type());
  std::vector<at::Tensor> chosen;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& layer = w.layers[i];
    at::Tensor normed = RmsNorm(x, layer.input_norm, c.rms_norm_eps);
    at::Tensor h = x + SelfAttention(c, layer, i, normed, cos, sin, input);
    normed = RmsNorm(h, layer.post_norm, c.rms_norm_eps);
    if (layer.moe_index < 0) {
      x = h + Mlp(layer.mlp, normed);
      continue;
    }
    at::Tensor replay, picked;
    if (input.replay.defined()) replay = input.replay.select(1, layer.moe_index).to(at::kLong);
    x = h + MoeBlock(layer, c, normed, replay, &picked);
    chosen.push_back(picked.to(kRoutingDtype));
  }
  if (routing != nullptr && !chosen.empty()) *routing = at::stack(chosen, 1);
  return RmsNorm(x, w.norm, c.rms_norm_eps);
}

}  // namespace loom::model
