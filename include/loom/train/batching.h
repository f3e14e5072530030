#pragma once
// Packing token sequences into micro-batches for Transformer::Score.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "loom/model/batch.h"

namespace loom::train {

// Groups sequence indices, in order, into micro-batches of at most
// `max_tokens` tokens (a longer sequence gets a micro-batch of its own).
std::vector<std::vector<size_t>> SplitByTokens(const std::vector<int64_t>& lengths,
                                               int64_t max_tokens);

// A teacher-forcing batch of `sequences` with, per position t, the weight of
// predicting token t + 1: per_token[i][t + 1] (0 on each sequence's last
// position). per_token: one [len] vector per sequence (e.g. a loss mask).
struct ShiftedBatch {
  model::PackedBatch batch;
  at::Tensor target_weight;  // [T] float32
};
ShiftedBatch TeacherForcing(const std::vector<const std::vector<int64_t>*>& sequences,
                            const std::vector<const std::vector<uint8_t>*>& per_token);

// Gathers `values[i][t + 1]` into the same shifted [T] layout (0 on each
// sequence's last position): float32 for floats, int64 for integers.
at::Tensor ShiftedValues(const std::vector<const std::vector<float>*>& values);
at::Tensor ShiftedValues(const std::vector<const std::vector<int64_t>*>& values);

}  // namespace loom::train
