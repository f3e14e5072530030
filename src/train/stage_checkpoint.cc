#include "train/stage_checkpoint.h"

#include <spdlog/spdlog.h>

#include "loom/config/check.h"
#include "loom/train/live_config.h"
#include "train/checkpointer.h"
#include "train/sft_stage.h"

namespace loom::train {
namespace {

TrainState CursorState(const TrainContext& context, const char* stage, int64_t step,
                       const AdamW& optimizer) {
  TrainState state;
  state.cursor.stage = stage;
  state.cursor.step = step;
  state.cursor.policy_version = context.policy_version;
  state.cursor.config_version = context.live.version();
  state.cursor.live = context.live.State();
  state.optimizer = optimizer.StateDict();
  return state;
}

}  // namespace

absl::Status AsyncBoundary(TrainContext& context, AsyncStageState loop, bool after_step) {
  return context.checkpointer.Boundary(
      after_step, context.policy_version, context.model,
      [&]() -> absl::StatusOr<TrainState> {
        TrainState state = CursorState(context, loop.stage, loop.loop.step(), loop.optimizer);
        auto cursor = loop.loop.Export();
        if (!cursor.ok()) return cursor.status();
        state.grpo = *std::move(cursor);
        return state;
      },
      [&](TrainState&& state) { return loop.loop.ContinueAfterExport(*std::move(state.grpo)); });
}

absl::Status RestoreAsync(TrainContext& context, AsyncStageState loop, PromptSource& prompts) {
  std::optional<TrainState> state = context.checkpointer.TakeResume(loop.stage);
  if (!state) return absl::OkStatus();
  LOOM_CHECK(state->grpo.has_value(),
             "checkpoint of stage " << loop.stage << " without a loop cursor");
  if (absl::Status s = loop.optimizer.LoadStateDict(state->optimizer); !s.ok()) return s;
  const RankChange* rank_change = state->rank_change ? &*state->rank_change : nullptr;
  auto imported =
      loop.loop.Import(*std::move(state->grpo), rank_change, state->cursor.step, prompts);
  if (!imported.ok()) return imported.status();
  const int64_t step = loop.loop.step();
  spdlog::info(
      "{} resumes at step {}: {} in-flight samples restored with {} KV tokens "
      "(no re-prefill), {} finished samples awaiting training, {} agent episodes attached "
      "again, {} started again",
      loop.stage, step, imported->inflight, imported->kv_tokens, imported->finished,
      imported->reattached, imported->started_again);
  return context.metrics.Write(
      {{"event", "resume"},
       {"stage", loop.stage},
       {"step", step},
       {"version", context.policy_version},
       {"inflight_restored", imported->inflight},
       {"kv_tokens_restored", imported->kv_tokens},
       {"finished_restored", imported->finished},
       {"episodes_resumed", imported->reattached},
       {"episodes_restarted", imported->started_again},
       {"ranks_written", rank_change ? rank_change->written_ranks : context.world_size()},
       {"ranks_taken_over", rank_change ? rank_change->adopted_ranks : std::vector<int>{}}});
}

absl::Status SftBoundary(TrainContext& context, AdamW& optimizer, const SftCursor& cursor,
                         int64_t step, bool after_step) {
  return context.checkpointer.Boundary(
      after_step, context.policy_version, context.model,
      [&]() -> absl::StatusOr<TrainState> {
        TrainState state = CursorState(context, kSftStage, step, optimizer);
        state.sft = cursor;
        return state;
      },
      [](TrainState&&) { return absl::OkStatus(); });
}

absl::StatusOr<bool> RestoreSft(TrainContext& context, AdamW& optimizer, SftCursor& cursor,
                                int64_t& step) {
  std::optional<TrainState> state = context.checkpointer.TakeResume(kSftStage);
  if (!state) return false;
  if (!state->sft) return absl::DataLossError("SFT checkpoint without an SFT data cursor");
  if (absl::Status s = optimizer.LoadStateDict(state->optimizer); !s.ok()) return s;
  cursor = *state->sft;
  step = state->cursor.step;
  spdlog::info("SFT resumes at step {}", step);
  absl::Status written = context.metrics.Write({{"event", "resume"},
                                                {"stage", kSftStage},
                                                {"step", step},
                                                {"version", context.policy_version}});
  if (!written.ok()) return written;
  return true;
}

}  // namespace loom::train
