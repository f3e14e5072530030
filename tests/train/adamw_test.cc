// loom's AdamW against LibTorch's own torch::optim::AdamW (an independent
// implementation), and the learning-rate schedule against its closed form.

#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <cmath>

#include "loom/train/adamw.h"

namespace loom::train {
namespace {

TEST(AdamWTest, MatchesLibTorchAdamW) {
  at::manual_seed(0);
  at::Tensor w0 = at::randn({4, 3});
  at::Tensor b0 = at::randn({3});
  at::Tensor x = at::randn({5, 4});
  at::Tensor mine_w = w0.clone().requires_grad_(), mine_b = b0.clone().requires_grad_();
  at::Tensor ref_w = w0.clone().requires_grad_(), ref_b = b0.clone().requires_grad_();
  AdamW mine({{"w", mine_w}, {"b", mine_b}}, {0.9, 0.95, 1e-8, 0.1});
  // LibTorch decays every parameter of a group: give the bias its own group without decay.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      std::vector<at::Tensor>{ref_w},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  groups.emplace_back(
      std::vector<at::Tensor>{ref_b},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0)));
  torch::optim::AdamW reference(groups, torch::optim::AdamWOptions(1e-2));
  for (int step = 0; step < 5; ++step) {
    mine.ZeroGrad();
    reference.zero_grad();
    (x.matmul(mine_w) + mine_b).tanh().pow(2).sum().backward();
    (x.matmul(ref_w) + ref_b).tanh().pow(2).sum().backward();
    mine.Step(1e-2);
    reference.step();
  }
  EXPECT_TRUE(at::allclose(mine_w, ref_w, 1e-6, 1e-6)) << (mine_w - ref_w).abs().max();
  EXPECT_TRUE(at::allclose(mine_b, ref_b, 1e-6, 1e-6)) << (mine_b - ref_b).abs().max();
  EXPECT_EQ(mine.steps(), 5);
}

TEST(AdamWTest, StateRoundTripContinuesIdentically) {
  at::manual_seed(1);
  at::Tensor w = at::randn({3, 3}).requires_grad_();
  at::Tensor w_copy = w.detach().clone().requires_grad_();
  AdamW first({{"w", w}}, {});
  auto loss = [](const at::Tensor& p) { return (p * p).sum(); };
  loss(w).backward();
  first.Step(0.1);
  AdamW second({{"w", w_copy}}, {});
  {
    at::NoGradGuard guard;
    w_copy.copy_(w);
  }
  ASSERT_TRUE(second.LoadStateDict(first.StateDict()).ok());
  first.ZeroGrad();
  loss(w).backward();
  first.Step(0.1);
  loss(w_copy).backward();
  second.Step(0.1);
  EXPECT_TRUE(at::equal(w, w_copy));
  model::TensorMap broken = first.StateDict();
  broken.erase("w.exp_avg_sq");
  EXPECT_EQ(second.LoadStateDict(broken).message(), "optimizer state: missing 'w.exp_avg_sq'");
}

TEST(AdamWTest, ClipGradNormScalesToTheBound) {
  at::Tensor w = at::zeros({2}).requires_grad_();
  AdamW opt({{"w", w}}, {});
  (w * at::tensor({3.0f, 4.0f})).sum().backward();  // grad (3, 4), norm 5
  EXPECT_NEAR(opt.ClipGradNorm(1.0), 5.0, 1e-6);
  EXPECT_NEAR(w.grad().norm().item<double>(), 1.0, 1e-5);
}

TEST(AdamWTest, ClipGradNormIsTheNormOverAllParameters) {
  at::manual_seed(0);
  at::Tensor a = at::zeros({3, 5}).requires_grad_();
  at::Tensor b = at::zeros({7}).requires_grad_();
  at::Tensor c = at::zeros({2}).requires_grad_();  // no gradient: skipped
  AdamW opt({{"a", a}, {"b", b}, {"c", c}}, {});
  ((a * at::randn({3, 5})).sum() + (b * at::randn({7})).sum()).backward();
  // Independent reference: per-tensor sums of squares added on the host.
  const double expected =
      std::sqrt(a.grad().pow(2).sum().item<double>() + b.grad().pow(2).sum().item<double>());
  EXPECT_NEAR(opt.ClipGradNorm(0.0), expected, 1e-6 * expected);
  EXPECT_NEAR(at::cat({a.grad().flatten(), b.grad()}).norm().item<double>(), expected,
              1e-6 * expected);  // max_norm 0: gradients untouched
}

TEST(ScheduleTest, WarmupThenCosine) {
  EXPECT_DOUBLE_EQ(WarmupCosineLr(1.0, 0, 110, 10, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(WarmupCosineLr(1.0, 9, 110, 10, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(WarmupCosineLr(1.0, 10, 110, 10, 0.1), 1.0);
  EXPECT_NEAR(WarmupCosineLr(1.0, 60, 110, 10, 0.1), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_NEAR(WarmupCosineLr(1.0, 110, 110, 10, 0.1), 0.1, 1e-12);
  EXPECT_NEAR(WarmupCosineLr(2.0, 35, 110, 10, 0.0), 2.0 * 0.5 * (1 + std::cos(M_PI * 0.25)),
              1e-12);
}

}  // namespace
}  // namespace loom::train
