#pragma once
// `effort:` and `grpo:` — the reasoning-effort levels each prompt is sampled
// at, the effort-conditioned length reward, and the clipped GRPO loss.

#include <random>
#include <string>
#include <vector>

#include "loom/config/effort_tiers.h"
#include "loom/config/schema.h"

namespace loom::config {

struct EffortSection {
  std::vector<int> levels = {100};           // the set B of training efforts
  std::vector<int> samples_per_level = {8};  // M_b: one entry, or one per level
  bool in_prompt = true;                     // render the effort line in prompts
  bool sft_every_effort = false;             // SFT draws half its efforts from 1..100

  template <class V>
  void Visit(V& v) {
    v.Field("levels", levels,
            Doc("The training efforts B (each in 1..100, or a tier name). Every prompt goes out "
                "as one subgroup per level; the chat encoder writes the numeric effort line.")
                .Named(EffortTiers()));
    v.Field("samples_per_level", samples_per_level,
            Doc("M_b, responses per (prompt, effort) subgroup: one value for every level or one "
                "per level. Advantages compare responses within a subgroup only.")
                .Unit("samples"));
    v.Field("in_prompt", in_prompt,
            Doc("Write the numeric effort line into every prompt (the DeepSeek-V4 format's "
                "reasoning-effort prefix, about 85 tokens). Off (one level only): prompts carry "
                "no effort line, as the V4 encoder renders effort `none`; with a single level the "
                "line tells the model nothing and costs most of a short prompt's compute."));
    v.Field("sft_every_effort", sft_every_effort,
            Doc("SFT shows half its examples at an effort drawn uniformly from 1..100, the "
                "other half at one of `levels` as without it, so that efforts between the "
                "training levels (60 between 50 and 75) have been read, and restated "
                "(tasks.datasets[].restate_effort), before GRPO trains at the levels only."));
  }

  // The effort shown in prompts for level b: b, or 0 (no effort line).
  int PromptEffort(int b) const { return in_prompt ? b : 0; }

  // The effort an SFT example is shown at: uniform over the levels, or with
  // sft_every_effort half the time uniform over 1..100.
  template <class Rng>
  int DrawSftEffort(Rng& rng) const {
    if (sft_every_effort && std::uniform_int_distribution<int>(0, 1)(rng) == 1) {
      return std::uniform_int_distribution<int>(1, 100)(rng);
    }
    return levels[std::uniform_int_distribution<size_t>(0, levels.size() - 1)(rng)];
  }

  // M_b of level index i.
  int SamplesAt(size_t i) const {
    return samples_per_level.size() == 1 ? samples_per_level[0] : samples_per_level[i];
  }
  // Samples per prompt: the sum of M_b.
  int GroupSize() const {
    int total = 0;
    for (size_t i = 0; i < levels.size(); ++i) total += SamplesAt(i);
    return total;
  }

  void Validate(ErrorSink& errors) const {
    if (levels.empty()) errors.Error("levels", "needs at least one effort");
    for (size_t i = 0; i < levels.size(); ++i) {
      if (levels[i] < 1 || levels[i] > 100) {
        errors.Error("levels", "effort " + std::to_string(levels[i]) + " is outside 1..100");
      }
      for (size_t j = 0; j < i; ++j) {
        if (levels[i] == levels[j])
          errors.Error("levels", "duplicate effort " + std::to_string(levels[i]));
      }
    }
    if (samples_per_level.size() != 1 && samples_per_level.size() != levels.size()) {
      errors.Error("samples_per_level", "needs 1 or " + std::to_string(levels.size()) +
                                            " entries (one per level), got " +
                                            std::to_string(samples_per_level.size()));
    }
    for (int m : samples_per_level) {
      if (m < 1) errors.Error("samples_per_level", "every entry must be >= 1");
    }
    if (!in_prompt && levels.size() > 1) {
      errors.Error("in_prompt", "false needs a single effort level: the model could not tell " +
                                    std::to_string(levels.size()) + " levels apart");
    }
  }
};

// r_len = -min(c_max, k(b) * l / l_norm), k(b) = k0 * exp(-(b - b_min) / (lambda * mean gap)).
struct LengthRewardSection {
  double k0 = 0.0;  // 0 = no length reward
  double c_max = 1.0;
  double l_norm = 256.0;
  double lambda = 1.0;

  template <class V>
  void Visit(V& v) {
    v.Field("k0", k0,
            Doc("Length-penalty coefficient at the smallest effort; it decays exponentially with "
                "effort. 0 turns the length reward off.")
                .Min(0));
    v.Field("c_max", c_max, Doc("Cap of the length penalty (a reward of at least -c_max).").Min(0));
    v.Field(
        "l_norm", l_norm,
        Doc("Reasoning length that costs k(b): lengths are divided by it.").Unit("tokens").Min(1));
    v.Field("lambda", lambda,
            Doc("Decay temperature of k(b) in units of the mean gap between effort levels: larger "
                "keeps high efforts penalised longer.")
                .Min(1e-6));
  }
};

struct GrpoSection {
  double clip_low = 0.2;   // ratio lower bound 1 - clip_low
  double clip_high = 0.2;  // ratio upper bound 1 + clip_high
  bool scale_by_std = false;
  double kl_coef = 0.0;
  std::string skip_uninformative = "auto";  // auto: on when kl_coef is 0
  LengthRewardSection length_reward;

  // Whether subgroups whose rewards all agree are left out of the step.
  bool SkipsUninformative() const {
    return skip_uninformative == "on" || (skip_uninformative == "auto" && kl_coef <= 0);
  }

  template <class V>
  void Visit(V& v) {
    v.Field("clip_low", clip_low,
            Doc("PPO clip: the importance ratio is clipped below at 1 - clip_low.").Range(0, 1));
    v.Field("clip_high", clip_high,
            Doc("PPO clip: the importance ratio is clipped above at 1 + clip_high (larger keeps "
                "exploration alive).")
                .Min(0));
    v.Field("scale_by_std", scale_by_std,
            Doc("Divide advantages by their subgroup's standard deviation (classic GRPO). Off: "
                "only centred on the subgroup mean, which does not amplify near-unanimous "
                "subgroups."));
    v.Field("kl_coef", kl_coef,
            Doc("Weight of a per-token KL penalty (k3 estimator) to the weights the GRPO stage "
                "started from, loaded from the previous stage's output (or model.path when "
                "GRPO comes first) and scored at the rollout temperature; metrics.jsonl then "
                "carries `kl`. 0 = off, and no reference copy is kept.")
                .Min(0));
    v.Field("skip_uninformative", skip_uninformative,
            Doc("Subgroups whose rewards all agree have advantage 0: no policy gradient. on: they "
                "are neither scored nor counted in the token normaliser, so the step size does "
                "not shrink with the share of uninformative subgroups (metrics: "
                "`skipped_samples`). off: they are scored and counted (their only gradient is "
                "the KL term's). auto: on when kl_coef is 0.")
                .OneOf({"auto", "on", "off"}));
    v.Section("length_reward", length_reward,
              Doc("Effort-conditioned length reward on reasoning tokens."));
  }
};

}  // namespace loom::config
