#pragma once
// The full-vocabulary reverse KL of on-policy distillation, for callers that
// hold a model's final hidden states themselves (Transformer::Score with
// ScoreOptions::hidden_rows) and bring in one teacher at a time: the OPD
// trainer runs the student's stack once per micro-batch and this once per
// teacher segment of it.

#include <cstdint>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "loom/model/batch.h"

namespace loom::model {

// KL(softmax(hidden[r] · head^T / T) ‖ teacher) for each row r of
// teacher.rows, over the whole vocabulary, in chunks of `chunk_rows` rows
// (forward and backward): [N] float32, differentiable w.r.t. `hidden` and
// `head`. `hidden`: [R, H] unscaled final hidden states; `head`: [V, H].
// INVALID_ARGUMENT on mismatched shapes or rows out of range.
absl::StatusOr<at::Tensor> ReverseKl(const at::Tensor& hidden, const at::Tensor& head,
                                     const TeacherRows& teacher, double temperature,
                                     int64_t chunk_rows = 256);

}  // namespace loom::model
