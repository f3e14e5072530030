#pragma once
// `train:` — which stages run, in order, and how each one optimises.

#include <cstdint>
#include <string>
#include <vector>

#include "loom/config/schema.h"

namespace loom::config {

// AdamW and its schedule, shared by every stage.
struct OptimizerFields {
  int64_t steps = 100;
  double lr = 1e-3;
  int64_t warmup_steps = 10;
  double min_lr_ratio = 0.1;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double eps = 1e-8;
  double grad_clip = 1.0;

  template <class V>
  void Visit(V& v) {
    v.Field("steps", steps, Doc("Optimizer steps of this stage.").Unit("steps").Min(0));
    v.Field("lr", lr, Doc("Peak learning rate (AdamW).").Min(0));
    v.Field("warmup_steps", warmup_steps,
            Doc("Linear warm-up from 0 to `lr` over this many steps, then cosine decay.")
                .Unit("steps")
                .Min(0));
    v.Field("min_lr_ratio", min_lr_ratio,
            Doc("The cosine decay ends at this fraction of `lr`.").Range(0, 1));
    v.Field("weight_decay", weight_decay,
            Doc("Decoupled weight decay on matrices (not norms or biases).").Min(0));
    v.Field("beta1", beta1, Doc("AdamW first-moment decay.").Range(0, 0.999999));
    v.Field("beta2", beta2, Doc("AdamW second-moment decay.").Range(0, 0.999999));
    v.Field("eps", eps,
            Doc("AdamW denominator term. A larger value (1e-5 .. 1e-3) makes parameters whose "
                "gradients are tiny and noisy, as in RL on small batches, move in proportion to "
                "their gradient instead of by a full learning-rate step.")
                .Min(0));
    v.Field("grad_clip", grad_clip,
            Doc("Clip the global gradient norm to this value; 0 = no clipping.").Min(0));
  }
};

struct SftStageSection : OptimizerFields {
  int batch_sequences = 32;

  template <class V>
  void Visit(V& v) {
    OptimizerFields::Visit(v);
    v.Field("batch_sequences", batch_sequences,
            Doc("Reference conversations per optimizer step.").Unit("sequences").Min(1));
  }
};

struct GrpoStageSection : OptimizerFields {
  template <class V>
  void Visit(V& v) {
    OptimizerFields::Visit(v);
  }
};

struct OpdStageSection : OptimizerFields {
  template <class V>
  void Visit(V& v) {
    OptimizerFields::Visit(v);
  }
};

struct TrainSection {
  std::vector<std::string> stages = {"sft", "grpo"};
  int64_t micro_batch_tokens = 4096;
  SftStageSection sft;
  GrpoStageSection grpo;
  OpdStageSection opd;

  template <class V>
  void Visit(V& v) {
    v.Field("stages", stages,
            Doc("Stages to run, in order; each starts from the previous one's weights. Each of "
                "sft, grpo and opd may appear at most once."));
    v.Field("micro_batch_tokens", micro_batch_tokens,
            Doc("Tokens per forward/backward pass; a training batch is split into micro-batches "
                "of at most this many (gradients accumulate). Smaller uses less memory.")
                .Unit("tokens")
                .Min(16));
    v.Section("sft", sft, Doc("Supervised fine-tuning on reference solutions."));
    v.Section("grpo", grpo, Doc("The GRPO stage's optimizer (the loss itself is `grpo:`)."));
    v.Section("opd", opd,
              Doc("The on-policy distillation stage's optimizer (the loss itself is `opd:`)."));
  }

  void Validate(ErrorSink& errors) const {
    for (size_t i = 0; i < stages.size(); ++i) {
      if (stages[i] != "sft" && stages[i] != "grpo" && stages[i] != "opd") {
        errors.Error("stages", "unknown stage '" + stages[i] + "' (expected sft, grpo or opd)");
      }
      for (size_t j = 0; j < i; ++j) {
        if (stages[i] == stages[j]) errors.Error("stages", "stage '" + stages[i] + "' twice");
      }
    }
  }
};

}  // namespace loom::config
