#pragma once
// Checkpointer: when the run loop writes checkpoints, where it resumes from,
// and what it does on preemption. One per `loom train`, owned by RunTraining
// and borrowed by the stages through TrainContext::checkpointer.
//
// The stages call Boundary() at every point where the run may stop: the SFT
// stage between optimizer steps, the GRPO stage between engine steps (a token
// boundary). Boundary() decides, without looking at the clock in the middle
// of a step: a checkpoint is due after an optimizer step when ckpt.every_steps
// divides the policy version or ckpt.every_minutes passed since the last one,
// and at any boundary once a preemption signal arrived. The stage's `capture`
// then builds the TrainState (the GRPO stage parks and exports its samples),
// the checkpoint is committed atomically, retention runs, and `release`
// (given the captured state back) lets the stage continue — or, after a
// preemption, Boundary() returns PreemptedStatus().
//
// Resume: Open() resolves --resume ("auto": the newest checkpoint that
// verifies and reads, each skipped one logged with its reason; a path: that
// one or a clear error). The model is loaded from ResumeModelDir(); each stage
// takes its own state with TakeResume(). Only the run loop thread calls this.
//
// Several ranks: every rank calls Boundary() at the same points; whether a
// checkpoint is due is decided once for all (a signal to any rank preempts
// every rank), every rank captures, rank 0 writes, and all wait until it is
// committed. In an async stage each other rank first stages its own loop
// (samples, dispatcher) and rank 0 seals those shares into the checkpoint
// under ranks/rank<r>/ (train_state.h), so one manifest covers them all.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/config/run_config.h"
#include "loom/dist/group.h"
#include "loom/model/transformer.h"
#include "loom/train/run_dir.h"
#include "loom/train/train_state.h"

namespace loom::train {

class Checkpointer {
 public:
  // `resume_spec`: "" (a fresh run), "auto" (the newest good checkpoint under
  // RUN_DIR/checkpoints, or a fresh run when there is none) or a checkpoint
  // directory. DATA_LOSS / FAILED_PRECONDITION naming the checkpoint when
  // nothing usable is found where one was asked for. `group`: the run's
  // ranks (borrowed; null for one rank).
  static absl::StatusOr<std::unique_ptr<Checkpointer>> Open(const config::RunConfig& config,
                                                            const RunDir& run_dir,
                                                            const std::string& resume_spec,
                                                            dist::Group* group = nullptr);

  // The checkpoint being resumed ("" for a fresh run) and its cursor.
  const std::string& resume_dir() const { return resume_dir_; }
  const std::optional<RunCursor>& resume_cursor() const { return resume_cursor_; }
  // Where to load the policy from: the checkpoint's model/ or config.model.path.
  std::string ModelDir() const;

  // The saved state of `stage` when the run stopped inside it (once; later
  // calls return nothing).
  std::optional<TrainState> TakeResume(const std::string& stage);

  using Capture = std::function<absl::StatusOr<TrainState>()>;
  using Release = std::function<absl::Status(TrainState&&)>;
  // See the file comment. `after_step`: an optimizer step just finished.
  // `model` is saved as it is; `capture` fills every field but the cursor's
  // stage_index (set here from the stage name).
  absl::Status Boundary(bool after_step, int64_t policy_version, const model::Transformer& model,
                        const Capture& capture, const Release& release);

  // Writes one checkpoint now (used by Boundary; exposed for tests).
  absl::StatusOr<std::string> Save(TrainState state, const model::Transformer& model);

 private:
  Checkpointer(const config::RunConfig& config, const RunDir& run_dir, dist::Group* group)
      : config_(config),
        run_dir_(run_dir),
        group_(group),
        last_save_(std::chrono::steady_clock::now()) {}
  // ckpt.every_steps divides `policy_version`, or (with `clock`)
  // ckpt.every_minutes passed since the last save.
  bool IntervalDue(int64_t policy_version, bool clock = true) const;
  // Several ranks, async stages: where rank `rank` stages its loop's share
  // of a checkpoint, its writing there, and (resuming) its reading back.
  std::string RankStagingDir(int rank) const;
  absl::Status StageRankShare(const TrainState& state) const;
  // Resuming an async stage: this rank's loop from the checkpoint, and on
  // another number of ranks the shares it takes over (RankChange).
  absl::Status TakeRankShare();
  std::string ShareDir(int rank) const;  // where rank `rank`'s loop was written
  int WrittenRanks() const;              // how many ranks wrote the checkpoint
  // The dispatcher state furthest along of the `written` ranks': the
  // stream every rank goes on from.
  absl::Status FurthestStream(int written, RankChange& change) const;
  // Takes rank `gone`'s share (a rank this run no longer has) into `own`.
  absl::Status AdoptRank(int gone, int written, GrpoCursor& own, RankChange& change) const;
  absl::Status ResolveAndRead(const std::string& resume_spec);

  const config::RunConfig& config_;
  const RunDir& run_dir_;
  dist::Group* group_;
  std::string resume_dir_;
  std::optional<RunCursor> resume_cursor_;
  std::optional<TrainState> resume_state_;
  std::chrono::steady_clock::time_point last_save_;
  int64_t last_saved_version_ = -1;
};

}  // namespace loom::train
