// A custom autograd function for chunked target log-probs.

#include "logprobs.h"

#include <torch/csrc/autograd/custom_function.h>

namespace loom::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct TargetLogprobFunction : public torch::autograd::Function<TargetLogprobFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& weight, const at::Tensor& targets, int64_t chunk) {
    const int64_t t = hidden.size(0);
    at::Tensor out = at::zeros({t}, hidden.options().dtype(at::kFloat));
    at::Tensor valid = targets.ge(0);
    at::Tensor safe = targets.clamp_min(0);
    for (int64_t begin = 0; begin < t; begin += chunk) {
      const int64_t n = std::min(chunk, t - begin);
      at::Tensor logits = at::matmul(hidden.narrow(0, begin, n), weight.t()).to(at::kFloat);
      at::Tensor picked = logits.gather(1, safe.narrow(0, begin, n).unsqueeze(1)).squeeze(1);
      at::Tensor lp = picked - at::logsumexp(logits, -1);
      out.narrow(0, begin, n).copy_(lp.masked_fill(valid.narrow(0, begin, n).logical_not(), 0));
    }
    ctx->save_for_backward({hidden, weight, targets});
    ctx->saved_data["chunk"] = chunk;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &weight = saved[1], &targets = saved[2];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const int64_t t = hidden.size(0);
    at::Tensor grad = grad_outputs[0].to(at::kFloat).masked_fill(targets.lt(0), 0);
    at::Tensor safe = targets.clamp_min(0);
    at::Tensor grad_hidden = at::empty_like(hidden);
    at::Tensor grad_weight = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    for (int64_t begin = 0; begin < t; begin += chunk) {
      const int64_t n = std::min(chunk, t - begin);
      at::Tensor h = hidden.narrow(0, begin, n);
      at::Tensor g = grad.narrow(0, begin, n).unsqueeze(1);  // [n, 1]
      at::Tensor probs = at::softmax(at::matmul(h, weight.t()).to(at::kFloat), -1);
      // d lp / d logits = onehot(target) - softmax.
      at::Tensor grad_logits =
          (probs * -g).scatter_add_(1, safe.narrow(0, begin, n).unsqueeze(1), g);
      at::Tensor gl = grad_logits.to(hidden.scalar_type());
      grad_hidden.narrow(0, begin, n).copy_(at::matmul(gl, weight));
      grad_weight.add_(at::matmul(gl.t(), h).to(at::kFloat));
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

// The teacher's log-probs at rows [begin, begin + n), float32: from its
// hidden states and head, or (an empty head) given.
at::Tensor TeacherChunk(const at::Tensor& teacher_hidden, const at::Tensor& teacher_head,
                        const at::Tensor& teacher_logprobs, int64_t begin, int64_t n) {
  if (teacher_head.numel() == 0) return teacher_logprobs.narrow(0, begin, n).to(at::kFloat);
  at::Tensor logits = at::matmul(teacher_hidden.narrow(0, begin, n), teacher_head.t());
  return at::log_softmax(logits.to(at::kFloat), -1);
}

// KL(p ‖ q) = sum_v p_v (log p_v - log q_v). Its gradient with respect to the
// student's logits z is p_v (log p_v - log q_v - KL): the softmax Jacobian
// applied to (log p - log q), the log-softmax's own term summing to zero.
struct ReverseKlFunction : public torch::autograd::Function<ReverseKlFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& weight, const at::Tensor& teacher_hidden,
                            const at::Tensor& teacher_head, const at::Tensor& teacher_logprobs,
                            int64_t chunk) {
    const int64_t t = hidden.size(0);
    at::Tensor out = at::zeros({t}, hidden.options().dtype(at::kFloat));
    for (int64_t begin = 0; begin < t; begin += chunk) {
      const int64_t n = std::min(chunk, t - begin);
      at::Tensor log_p =
          at::log_softmax(at::matmul(hidden.narrow(0, begin, n), weight.t()).to(at::kFloat), -1);
      at::Tensor log_q = TeacherChunk(teacher_hidden, teacher_head, teacher_logprobs, begin, n);
      out.narrow(0, begin, n).copy_((log_p.exp() * (log_p - log_q)).sum(-1));
    }
    ctx->save_for_backward({hidden, weight, teacher_hidden, teacher_head, teacher_logprobs, out});
    ctx->saved_data["chunk"] = chunk;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &weight = saved[1], &kl = saved[5];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const int64_t t = hidden.size(0);
    at::Tensor grad = grad_outputs[0].to(at::kFloat);
    at::Tensor grad_hidden = at::empty_like(hidden);
    at::Tensor grad_weight = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    for (int64_t begin = 0; begin < t; begin += chunk) {
      const int64_t n = std::min(chunk, t - begin);
      at::Tensor h = hidden.narrow(0, begin, n);
      at::Tensor log_p = at::log_softmax(at::matmul(h, weight.t()).to(at::kFloat), -1);
      at::Tensor log_q = TeacherChunk(saved[2], saved[3], saved[4], begin, n);
      at::Tensor grad_logits = log_p.exp() * (log_p - log_q - kl.narrow(0, begin, n).unsqueeze(1)) *
                               grad.narrow(0, begin, n).unsqueeze(1);
      at::Tensor gl = grad_logits.to(hidden.scalar_type());
      grad_hidden.narrow(0, begin, n).copy_(at::matmul(gl, weight));
      grad_weight.add_(at::matmul(gl.t(), h).to(at::kFloat));
    }
    return {grad_hidden,  grad_weight.to(weight.scalar_type()),
            at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ChunkedReverseKl(const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& teacher_hidden, const at::Tensor& teacher_head,
                            const at::Tensor& teacher_logprobs, int64_t chunk_rows) {
  // Autograd functions take defined tensors only: an unused side is empty.
  auto or_empty = [&](const at::Tensor& x) {
    return x.defined() ? x : at::empty({0}, hidden.options());
  };
  return ReverseKlFunction::apply(hidden, weight, or_empty(teacher_hidden), or_empty(teacher_head),
                                  or_empty(teacher_logprobs), std::max<int64_t>(1, chunk_rows));
}

at::Tensor ChunkedTargetLogprobs(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t chunk_rows) {
  return TargetLogprobFunction::apply(hidden, weight, targets, std::max<int64_t>(1, chunk_rows));
}

at::Tensor FullLogprobs(const at::Tensor& hidden, const at::Tensor& weight, int64_t chunk_rows) {
  std::vector<at::Tensor> parts;
  const int64_t n = hidden.size(0), chunk = std::max<int64_t>(1, chunk_rows);
  for (int64_t begin = 0; begin < n; begin += chunk) {
    at::Tensor h = hidden.narrow(0, begin, std::min(chunk, n - begin));
    parts.push_back(at::log_softmax(at::matmul(h, weight.t()).to(at::kFloat), -1));
  }
  if (parts.empty()) return at::zeros({0, weight.size(0)}, hidden.options().dtype(at::kFloat));
  return at::cat(parts);
}

}  // namespace loom::model
