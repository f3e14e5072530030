#include "loom/train/adamw.h"

#include <cmath>
#include <vector>

namespace loom::train {

AdamW::AdamW(std::vector<std::pair<std::string, at::Tensor>> params, AdamWOptions options)
    : options_(options) {
  for (auto& [name, param] : params) {
    Slot slot;
    slot.name = name;
    slot.param = param;
    auto state_options = param.options().dtype(at::kFloat).requires_grad(false);
    slot.exp_avg = at::zeros(param.sizes(), state_options);
    slot.exp_avg_sq = at::zeros(param.sizes(), state_options);
    slot.decay = param.dim() >= 2;
    slots_.push_back(std::move(slot));
  }
}

void AdamW::Step(double lr) {
  at::NoGradGuard no_grad;
  ++steps_;
  const double bias1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_));
  const double bias2 = 1.0 - std::pow(options_.beta2, static_cast<double>(steps_));
  for (Slot& slot : slots_) {
    const at::Tensor& grad_ref = slot.param.grad();
    if (!grad_ref.defined()) continue;
    at::Tensor grad = grad_ref.to(at::kFloat);
    slot.exp_avg.mul_(options_.beta1).add_(grad, 1.0 - options_.beta1);
    slot.exp_avg_sq.mul_(options_.beta2).addcmul_(grad, grad, 1.0 - options_.beta2);
    at::Tensor denom = (slot.exp_avg_sq / bias2).sqrt_().add_(options_.eps);
    at::Tensor update = slot.exp_avg / denom * (lr / bias1);
    if (slot.decay && options_.weight_decay > 0) {
      slot.param.mul_(1.0 - lr * options_.weight_decay);
    }
    slot.param.sub_(update.to(slot.param.scalar_type()));
  }
}

void AdamW::ZeroGrad() {
  for (Slot& slot : slots_) {
    at::Tensor& grad = slot.param.mutable_grad();
    if (grad.defined()) grad.zero_();
  }
}

double AdamW::ClipGradNorm(double max_norm) {
  at::NoGradGuard no_grad;
  // Per-parameter float32 sums of squares, added in float64 where the
  // gradients live and read back once (one device sync, not one per tensor).
  std::vector<at::Tensor> squares;
  for (const Slot& slot : slots_) {
    const at::Tensor& grad = slot.param.grad();
    if (grad.defined()) squares.push_back(grad.to(at::kFloat).pow(2).sum().to(at::kDouble));
  }
  const double total_sq = squares.empty() ? 0.0 : at::stack(squares).sum().item<double>();
  const double norm = std::sqrt(total_sq);
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (Slot& slot : slots_) {
      at::Tensor& grad = slot.param.mutable_grad();
      if (grad.defined()) grad.mul_(scale);
    }
  }
  return norm;
}

model::TensorMap AdamW::StateDict() const {
  model::TensorMap state;
  state["step"] = at::tensor({steps_}, at::kLong);
  for (const Slot& slot : slots_) {
    state[slot.name + ".exp_avg"] = slot.exp_avg.cpu().clone();
    state[slot.name + ".exp_avg_sq"] = slot.exp_avg_sq.cpu().clone();
  }
  return state;
}

absl::Status AdamW::LoadStateDict(const model::TensorMap& state) {
  auto step = state.find("step");
  if (step == state.end() || step->second.numel() != 1) {
    return absl::InvalidArgumentError("optimizer state: missing 'step'");
  }
  for (const Slot& slot : slots_) {
    for (const char* suffix : {".exp_avg", ".exp_avg_sq"}) {
      auto it = state.find(slot.name + suffix);
      if (it == state.end()) {
        return absl::InvalidArgumentError("optimizer state: missing '" + slot.name + suffix + "'");
      }
      if (!it->second.sizes().equals(slot.param.sizes())) {
        return absl::InvalidArgumentError("optimizer state: '" + slot.name + suffix +
                                          "' has the wrong shape");
      }
    }
  }
  at::NoGradGuard no_grad;
  steps_ = step->second.item<int64_t>();
  for (Slot& slot : slots_) {
    slot.exp_avg.copy_(state.at(slot.name + ".exp_avg"));
    slot.exp_avg_sq.copy_(state.at(slot.name + ".exp_avg_sq"));
  }
  return absl::OkStatus();
}

double WarmupCosineLr(double peak, int64_t step, int64_t total_steps, int64_t warmup_steps,
                      double min_ratio) {
  if (warmup_steps > 0 && step < warmup_steps) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return peak * (min_ratio + (1.0 - min_ratio) * cosine);
}

}  // namespace loom::train
