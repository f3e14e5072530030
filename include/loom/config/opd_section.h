#pragma once
// `opd:` — on-policy distillation: the teachers, the estimator of the
// per-token reverse KL, the optional verifier-reward term, and the device
// memory the teacher pool may hold.

#include <cstdint>
#include <string>
#include <vector>

#include "loom/config/schema.h"

namespace loom::config {

// One teacher: a model directory sharing the student's tokenizer.
struct TeacherSection {
  std::string name;    // required; unique; what tasks.datasets[].teacher names
  std::string path;    // required; HF-layout model directory
  std::string config;  // optional: the run config that makes `path` when it is missing

  template <class V>
  void Visit(V& v) {
    v.Field(
        "name", name,
        Doc("Teacher name: unique; datasets name their teacher by it (tasks.datasets[].teacher).")
            .Required());
    v.Field("path", path,
            Doc("Model directory in the Hugging Face layout (config.json, *.safetensors, "
                "tokenizer.json). Any supported architecture and size; its tokenizer must be the "
                "student's.")
                .Required());
    v.Field("config", config,
            Doc("A run config that produces this teacher: when `path` holds no model at start, "
                "`loom train` first runs `loom train --config` on it (in a child process) and "
                "expects the teacher at `path` afterwards. Empty: `path` must exist."));
  }
};

struct OpdSection {
  std::vector<TeacherSection> teachers;
  std::string estimator = "full";
  double reward_weight = 0.0;
  double clip_low = 0.2;
  double clip_high = 0.2;
  bool scale_by_std = false;
  int64_t teacher_memory_bytes = 0;
  bool eval_teachers = true;

  bool FullKl() const { return estimator == "full"; }

  template <class V>
  void Visit(V& v) {
    v.List(
        "teachers", teachers,
        Doc("The teachers of the opd stage; each dataset names one (tasks.datasets[].teacher)."));
    v.Field("estimator", estimator,
            Doc("full: the exact reverse KL(student ‖ teacher) over the whole vocabulary at every "
                "response token, its gradient through the student's whole distribution. sampled: "
                "the sampled-token form — per-token advantage log p_teacher(y) - log "
                "p_behaviour(y) in the clipped policy loss, as NeMo-RL's MOPD.")
                .OneOf({"full", "sampled"}));
    v.Field("reward_weight", reward_weight,
            Doc("Weight of the GRPO loss on verifier rewards added to the distillation loss "
                "(subgroup advantages as in the grpo stage, clipped by opd.clip_low/high). 0 = "
                "pure distillation.")
                .Min(0));
    v.Field("clip_low", clip_low,
            Doc("The clipped policy term's ratio lower bound 1 - clip_low (the sampled estimator "
                "and the reward term; the opd stage's own, not grpo.clip_low).")
                .Range(0, 1));
    v.Field("clip_high", clip_high,
            Doc("The clipped policy term's ratio upper bound 1 + clip_high (the opd stage's own, "
                "not grpo.clip_high).")
                .Min(0));
    v.Field("scale_by_std", scale_by_std,
            Doc("The reward term's advantages divided by their subgroup's reward standard "
                "deviation (as grpo.scale_by_std, for the opd stage)."));
    v.Field("teacher_memory_bytes", teacher_memory_bytes,
            Doc("Teacher weights resident on the device at once; the least recently used "
                "teacher is evicted to make room (its weights stay mapped from disk). Every "
                "teacher must fit alone. 0 = no limit.")
                .Unit("bytes")
                .Min(0));
    v.Field("eval_teachers", eval_teachers,
            Doc("When the opd stage starts, evaluate each teacher greedily on the held-out sets "
                "of the datasets it teaches (metrics.jsonl: an `event: teacher_eval` line per "
                "teacher): the baseline the student's accuracy is measured against."));
  }

  void Validate(ErrorSink& errors) const {
    for (size_t i = 0; i < teachers.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (teachers[i].name == teachers[j].name) {
          errors.Error("teachers[" + std::to_string(i) + "].name",
                       "duplicate teacher name '" + teachers[i].name + "'");
        }
      }
    }
  }
};

}  // namespace loom::config
