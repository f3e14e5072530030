// Transformer::Score: the training / scoring forward over a packed batch.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "autocast.h"
#include "forward.h"
#include "logprobs.h"
#include "loom/model/distill.h"
#include "loom/model/transformer.h"

namespace loom::model {
namespace {

absl::Status CheckIds(const at::Tensor& ids, int64_t lo, int64_t hi, const char* what) {
  if (ids.numel() == 0) return absl::OkStatus();
  int64_t min = ids.min().item<int64_t>(), max = ids.max().item<int64_t>();
  if (min < lo || max >= hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " out of range [", lo, ", ", hi, "): found ", min < lo ? min : max));
  }
  return absl::OkStatus();
}

absl::Status ValidateBatch(const PackedBatch& b, const ModelConfig& c) {
  if (!b.tokens.defined() || b.tokens.dim() != 1 || b.tokens.scalar_type() != at::kLong) {
    return absl::InvalidArgumentError("tokens must be a [T] int64 tensor");
  }
  const int64_t t = b.tokens.size(0);
  int64_t sum = 0;
  for (int64_t n : b.lengths) {
    if (n <= 0) return absl::InvalidArgumentError("every sequence length must be > 0");
    sum += n;
  }
  if (sum != t) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence lengths sum to ", sum, " but there are ", t, " tokens"));
  }
  auto is_rows = [&](const at::Tensor& x) { return x.dim() == 1 && x.size(0) == t; };
  if (b.targets.defined() && !is_rows(b.targets)) {
    return absl::InvalidArgumentError("targets must be [T]");
  }
  if (b.positions.defined() && !is_rows(b.positions)) {
    return absl::InvalidArgumentError("positions must be [T]");
  }
  if (auto s = CheckIds(b.tokens, 0, c.vocab_size, "token id"); !s.ok()) return s;
  if (b.targets.defined()) {
    if (auto s = CheckIds(b.targets, -1, c.vocab_size, "target id"); !s.ok()) return s;
  }
  if (b.replay_routing.defined()) {
    std::vector<int64_t> want = {t, c.NumMoeLayers(), c.num_experts_per_tok};
    if (b.replay_routing.sizes().vec() != want || c.NumMoeLayers() == 0) {
      return absl::InvalidArgumentError("replay_routing must be [T, n_moe_layers, k]");
    }
    if (auto s = CheckIds(b.replay_routing.to(at::kLong), 0, c.num_experts, "replayed expert id");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

at::Tensor DefaultPositions(const std::vector<int64_t>& lengths) {
  std::vector<at::Tensor> parts;
  for (int64_t n : lengths) parts.push_back(at::arange(n, at::kLong));
  return parts.empty() ? at::zeros({0}, at::kLong) : at::cat(parts);
}

}  // namespace

absl::StatusOr<ScoreResult> Transformer::Score(const PackedBatch& batch,
                                               const ScoreOptions& options) const {
  if (auto status = ValidateBatch(batch, config_); !status.ok()) return status;
  if (!(options.temperature > 0) || !std::isfinite(options.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Score: temperature must be > 0, got ", options.temperature));
  }
  for (const auto& [rows, what] : {std::pair{&options.full_vocab_rows, "full-vocab row"},
                                   std::pair{&options.hidden_rows, "hidden row"}}) {
    if (!rows->defined()) continue;
    if (rows->dim() != 1 || rows->scalar_type() != at::kLong) {
      return absl::InvalidArgumentError(absl::StrCat(what, "s must be a [N] int64 tensor"));
    }
    if (auto s = CheckIds(*rows, 0, batch.tokens.size(0), what); !s.ok()) return s;
  }
  try {
    const at::Device device = options_.device;
    PaddedLayout layout =
        MakeLayout(batch.lengths, std::vector<int64_t>(batch.lengths.size(), 0), device);
    StackInput input;
    input.tokens = batch.tokens.to(device);
    input.positions =
        (batch.positions.defined() ? batch.positions : DefaultPositions(batch.lengths)).to(device);
    input.attention = [&layout](int64_t, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v) {
      return PaddedAttention(q, Pad(k, layout), Pad(v, layout), layout);
    };
    if (batch.replay_routing.defined()) input.replay = batch.replay_routing.to(device);
    ScoreResult result;
    at::Tensor hidden;
    {
      AutocastGuard autocast(options_.autocast, device.type());
      hidden = RunStack(config_, *weights_, input, &result.routing);
    }
    if (options.hidden_rows.defined()) {
      result.hidden = hidden.index_select(0, options.hidden_rows.to(device));
    }
    if (options.teacher != nullptr) {
      auto kl = ReverseKl(hidden, weights_->lm_head, *options.teacher, options.temperature,
                          options.chunk_tokens);
      if (!kl.ok()) return kl.status();
      result.kl = *std::move(kl);
    }
    // logits / T == (hidden / T) · lm_head^T, so the chunked kernels stay as they are.
    if (options.temperature != 1.0) hidden = hidden / options.temperature;
    at::Tensor targets = batch.targets.defined()
                             ? batch.targets.to(device)
                             : at::full({batch.tokens.size(0)}, -1, input.tokens.options());
    result.logprobs =
        batch.targets.defined()
            ? ChunkedTargetLogprobs(hidden, weights_->lm_head, targets, options.chunk_tokens)
            : at::zeros({batch.tokens.size(0)}, hidden.options().dtype(at::kFloat));
    if (options.full_vocab_rows.defined()) {
      at::Tensor rows = hidden.index_select(0, options.full_vocab_rows.to(device));
      result.full_logprobs = FullLogprobs(rows, weights_->lm_head, options.chunk_tokens);
    }
    return result;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("Score: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<at::Tensor> ReverseKl(const at::Tensor& hidden, const at::Tensor& head,
                                     const TeacherRows& teacher, double temperature,
                                     int64_t chunk_rows) {
  if (!(temperature > 0) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be > 0, got ", temperature));
  }
  const at::Device device = hidden.device();
  if (!teacher.rows.defined() || teacher.rows.dim() != 1 ||
      teacher.rows.scalar_type() != at::kLong) {
    return absl::InvalidArgumentError("teacher rows must be a [N] int64 tensor");
  }
  const int64_t n = teacher.rows.size(0), vocab = head.size(0);
  if (auto s = CheckIds(teacher.rows, 0, hidden.size(0), "teacher row"); !s.ok()) return s;
  at::Tensor teacher_hidden, teacher_head, teacher_logprobs;
  if (teacher.head.defined()) {
    if (teacher.head.dim() != 2 || teacher.head.size(0) != vocab || !teacher.hidden.defined() ||
        teacher.hidden.sizes().vec() != std::vector<int64_t>{n, teacher.head.size(1)}) {
      return absl::InvalidArgumentError(absl::StrCat(
          "teacher head must be [", vocab, ", H_t] and its hidden states [", n, ", H_t]"));
    }
    teacher_head = teacher.head.to(device);
    teacher_hidden = teacher.hidden.to(device, teacher_head.scalar_type()) / temperature;
  } else {
    if (!teacher.logprobs.defined() ||
        teacher.logprobs.sizes().vec() != std::vector<int64_t>{n, vocab}) {
      return absl::InvalidArgumentError(
          absl::StrCat("teacher log-probs must be [", n, ", ", vocab, "]"));
    }
    teacher_logprobs = teacher.logprobs.to(device);
  }
  at::Tensor rows = hidden.index_select(0, teacher.rows.to(device));
  if (temperature != 1.0) rows = rows / temperature;
  return ChunkedReverseKl(rows, head, teacher_hidden, teacher_head, teacher_logprobs, chunk_rows);
}

PackedBatch TeacherForcingBatch(const std::vector<std::vector<int64_t>>& sequences) {
  PackedBatch batch;
  std::vector<int64_t> tokens, targets;
  for (const auto& seq : sequences) {
    batch.lengths.push_back(static_cast<int64_t>(seq.size()));
    for (size_t i = 0; i < seq.size(); ++i) {
      tokens.push_back(seq[i]);
      targets.push_back(i + 1 < seq.size() ? seq[i + 1] : -1);
    }
  }
  batch.tokens = at::tensor(tokens, at::kLong);
  batch.targets = at::tensor(targets, at::kLong);
  return batch;
}

}  // namespace loom::model
