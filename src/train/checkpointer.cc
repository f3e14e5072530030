#include "train/checkpointer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <vector>

#include "loom/ckpt/checkpoint.h"
#include "loom/config/files.h"
#include "loom/train/preemption.h"

namespace loom::train {

namespace fs = std::filesystem;
namespace {

// A checkpoint that verified and read, checked against this run's config.
absl::Status CheckCompatible(const TrainState& state, const config::RunConfig& config,
                             const std::string& dir) {
  const auto& stages = config.train.stages;
  const int index = state.cursor.stage_index;
  if (index >= static_cast<int>(stages.size()) || stages[index] != state.cursor.stage) {
    return absl::FailedPreconditionError(dir + ": written in stage '" + state.cursor.stage +
                                         "' (number " + std::to_string(index + 1) +
                                         "), which this config's train.stages does not have there");
  }
  if (!ReadFile(dir + "/model/config.json").ok()) {
    return absl::DataLossError(dir + ": model/config.json is missing");
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainState> ReadChecked(const std::string& dir, const config::RunConfig& config) {
  auto manifest = ckpt::VerifyCheckpoint(dir);
  if (!manifest.ok()) return manifest.status();
  auto state = ReadTrainState(dir);
  if (!state.ok()) return state.status();
  if (absl::Status s = CheckCompatible(*state, config, dir); !s.ok()) return s;
  return state;
}

// Newest first, the one `latest` names ahead of all.
std::vector<std::string> Candidates(const std::string& root) {
  std::vector<std::string> dirs = ckpt::ListCheckpoints(root);
  std::reverse(dirs.begin(), dirs.end());
  auto latest = ReadFile(root + "/latest");
  if (latest.ok()) {
    std::string name = *latest;
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    auto it = std::find(dirs.begin(), dirs.end(), root + "/" + name);
    if (it != dirs.end()) std::rotate(dirs.begin(), it, it + 1);
  }
  return dirs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpointer>> Checkpointer::Open(const config::RunConfig& config,
                                                                 const RunDir& run_dir,
                                                                 const std::string& resume_spec,
                                                                 dist::Group* group) {
  std::unique_ptr<Checkpointer> checkpointer(new Checkpointer(config, run_dir, group));
  if (!resume_spec.empty()) {
    if (absl::Status s = checkpointer->ResolveAndRead(resume_spec); !s.ok()) return s;
    if (absl::Status s = checkpointer->TakeRankShare(); !s.ok()) return s;
  }
  return checkpointer;
}

absl::Status Checkpointer::ResolveAndRead(const std::string& resume_spec) {
  std::vector<std::string> dirs;
  if (resume_spec == "auto") {
    dirs = Candidates(run_dir_.checkpoints_path());
    if (dirs.empty()) {
      spdlog::info("--resume auto: no checkpoint in {}; starting from the beginning",
                   run_dir_.checkpoints_path());
      return absl::OkStatus();
    }
  } else {
    dirs = {resume_spec};
  }
  std::string skipped;
  for (const std::string& dir : dirs) {
    auto state = ReadChecked(dir, config_);
    if (!state.ok()) {
      if (resume_spec != "auto") return state.status();
      spdlog::warn("--resume auto: skipping checkpoint {}: {}", dir,
                   std::string(state.status().message()));
      skipped += "\n  " + dir + ": " + std::string(state.status().message());
      continue;
    }
    resume_dir_ = dir;
    resume_cursor_ = state->cursor;
    resume_state_ = *std::move(state);
    last_saved_version_ = resume_cursor_->policy_version;
    spdlog::info("resuming from {} (stage {}, step {}, policy version {})", dir,
                 resume_cursor_->stage, resume_cursor_->step, resume_cursor_->policy_version);
    return absl::OkStatus();
  }
  return absl::DataLossError("--resume auto: no usable checkpoint in " +
                             run_dir_.checkpoints_path() + ":" + skipped);
}

std::string Checkpointer::RankStagingDir(int rank) const {
  return run_dir_.checkpoints_path() + "/.ranks/rank" + std::to_string(rank);
}

absl::Status Checkpointer::StageRankShare(const TrainState& state) const {
  const std::string dir = RankStagingDir(group_->rank());
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError("cannot create " + dir + ": " + ec.message());
  return WriteRankState(state, dir);
}

std::string Checkpointer::ShareDir(int rank) const {
  return rank == 0 ? resume_dir_ : resume_dir_ + "/ranks/rank" + std::to_string(rank);
}

int Checkpointer::WrittenRanks() const {
  int ranks = 1;
  while (fs::exists(ShareDir(ranks) + "/state.json")) ++ranks;
  return ranks;
}

absl::Status Checkpointer::FurthestStream(int written, RankChange& change) const {
  uint64_t furthest = 0;
  for (int r = 0; r < written; ++r) {
    auto dispatcher = ReadDispatcherState(ShareDir(r));
    if (!dispatcher.ok()) return dispatcher.status();
    const auto next_id = dispatcher->find("next_id");
    if (next_id == dispatcher->end() || !next_id->is_number_unsigned()) {
      return absl::DataLossError(ShareDir(r) + "/state.json: grpo.dispatcher has no next_id");
    }
    if (change.stream.is_null() || next_id->get<uint64_t>() > furthest) {
      furthest = next_id->get<uint64_t>();
      change.stream = *std::move(dispatcher);
    }
  }
  return absl::OkStatus();
}

absl::Status Checkpointer::AdoptRank(int gone, int written, GrpoCursor& own,
                                     RankChange& change) const {
  auto share = ReadRankState(ShareDir(gone));
  if (!share.ok()) return share.status();
  spdlog::info(
      "{} was written by {} ranks: rank {} takes over rank {}'s {} in-flight and {} "
      "finished samples",
      resume_dir_, written, group_ != nullptr ? group_->rank() : 0, gone, share->inflight.size(),
      share->finished());
  auto append = [](auto& into, auto& from) {
    into.insert(into.end(), std::make_move_iterator(from.begin()),
                std::make_move_iterator(from.end()));
  };
  append(own.inflight, share->inflight);
  append(own.samples, share->samples);
  own.episodes.merge(share->episodes);
  own.prefill_tokens += share->prefill_tokens;
  own.decode_tokens += share->decode_tokens;
  change.adopted_ranks.push_back(gone);
  change.adopted.push_back(std::move(share->dispatcher));
  return absl::OkStatus();
}

absl::Status Checkpointer::TakeRankShare() {
  if (!resume_state_ || !resume_state_->grpo) return absl::OkStatus();
  const int world = group_ != nullptr ? group_->size() : 1;
  const int rank = group_ != nullptr ? group_->rank() : 0;
  const int written = WrittenRanks();
  if (rank != 0) {
    // Rank 0's loop was read with the checkpoint; this rank's replaces it.
    if (rank < written) {
      auto share = ReadRankState(ShareDir(rank));
      if (!share.ok()) return share.status();
      resume_state_->grpo = *std::move(share);
    } else {
      resume_state_->grpo = GrpoCursor{};  // a new rank: its loop starts empty
    }
  }
  if (written == world) return absl::OkStatus();

  RankChange change;
  change.written_ranks = written;
  if (absl::Status s = FurthestStream(written, change); !s.ok()) return s;
  GrpoCursor& own = *resume_state_->grpo;
  for (int gone = world; gone < written; ++gone) {
    if (gone % world != rank) continue;
    if (absl::Status s = AdoptRank(gone, written, own, change); !s.ok()) return s;
  }
  auto by_id = [](const auto& a, const auto& b) { return a.id < b.id; };
  std::sort(own.inflight.begin(), own.inflight.end(), by_id);
  std::sort(own.samples.begin(), own.samples.end(), by_id);
  resume_state_->rank_change = std::move(change);
  return absl::OkStatus();
}

std::string Checkpointer::ModelDir() const {
  return resume_dir_.empty() ? config_.model.path : resume_dir_ + "/model";
}

std::optional<TrainState> Checkpointer::TakeResume(const std::string& stage) {
  if (!resume_state_ || resume_state_->cursor.stage != stage) return std::nullopt;
  std::optional<TrainState> out = std::move(resume_state_);
  resume_state_.reset();
  return out;
}

bool Checkpointer::IntervalDue(int64_t policy_version, bool clock) const {
  if (policy_version == last_saved_version_) return false;
  const auto& ckpt = config_.ckpt;
  if (ckpt.every_steps > 0 && policy_version % ckpt.every_steps == 0) return true;
  if (!clock || ckpt.every_minutes <= 0) return false;
  const auto elapsed = std::chrono::steady_clock::now() - last_save_;
  return std::chrono::duration<double>(elapsed).count() >= ckpt.every_minutes * 60.0;
}

absl::Status Checkpointer::Boundary(bool after_step, int64_t policy_version,
                                    const model::Transformer& model, const Capture& capture,
                                    const Release& release) {
  bool preempted = PreemptionRequested();
  bool due = preempted || (after_step && IntervalDue(policy_version));
  if (group_ != nullptr) {
    // One decision for every rank: a signal to any rank preempts all, and
    // the minutes interval follows rank 0's clock (max over ranks of both).
    auto decided = group_->Max({preempted ? 1.0 : 0.0, due && group_->rank() == 0 ? 1.0 : 0.0});
    if (!decided.ok()) return decided.status();
    preempted = (*decided)[0] > 0;
    due = preempted ||
          (after_step && ((*decided)[1] > 0 || IntervalDue(policy_version, /*clock=*/false)));
  }
  if (!due) return absl::OkStatus();
  if (preempted) {
    spdlog::info("{}: stopping at this token boundary to checkpoint",
                 PreemptionRequested()
                     ? "signal " + std::to_string(PreemptionSignal()) + " received"
                     : std::string("another rank was signalled"));
  }
  auto state = capture();
  if (!state.ok()) return state.status();
  std::string dir = run_dir_.checkpoints_path();  // where rank 0 writes it
  if (group_ != nullptr && group_->rank() != 0) {
    // An async stage's loop differs per rank: each other rank stages its
    // share for rank 0 to seal into the checkpoint.
    if (state->grpo) {
      if (absl::Status s = StageRankShare(*state); !s.ok()) return s;
    }
    last_saved_version_ = policy_version;
  }
  if (group_ != nullptr && state->grpo) {
    if (absl::Status s = group_->Barrier(); !s.ok()) return s;  // every share staged
  }
  if (group_ == nullptr || group_->rank() == 0) {
    auto saved = Save(*state, model);
    if (!saved.ok()) return saved.status();
    dir = *saved;
  }
  if (group_ != nullptr) {
    // No rank goes on (or exits) before the checkpoint is committed.
    if (absl::Status s = group_->Barrier(); !s.ok()) return s;
  }
  if (preempted) return PreemptedStatus(dir);
  return release(*std::move(state));
}

absl::StatusOr<std::string> Checkpointer::Save(TrainState state, const model::Transformer& model) {
  const auto& stages = config_.train.stages;
  state.cursor.stage_index = static_cast<int>(
      std::find(stages.begin(), stages.end(), state.cursor.stage) - stages.begin());
  const double start =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const std::string root = run_dir_.checkpoints_path();
  auto writer = ckpt::CheckpointWriter::Begin(root, state.cursor.policy_version);
  if (!writer.ok()) return writer.status();
  auto meta =
      WriteTrainState(state, model, config_.model.path + "/tokenizer.json", config_, writer->dir());
  if (!meta.ok()) return meta.status();
  if (group_ != nullptr && state.grpo) {
    // The other ranks' loops, staged by them before the barrier.
    std::error_code ec;
    fs::create_directories(writer->dir() + "/ranks", ec);
    for (int r = 1; r < group_->size(); ++r) {
      fs::rename(RankStagingDir(r), writer->dir() + "/ranks/rank" + std::to_string(r), ec);
      if (ec) {
        return absl::DataLossError("checkpoint: rank " + std::to_string(r) + "'s share " +
                                   RankStagingDir(r) + " cannot be sealed: " + ec.message());
      }
    }
    (*meta)["ranks"] = group_->size();
  }
  auto dir = writer->Commit(*meta);
  if (!dir.ok()) return dir.status();
  last_save_ = std::chrono::steady_clock::now();
  last_saved_version_ = state.cursor.policy_version;
  if (absl::Status s = ckpt::ApplyRetention(root, config_.ckpt.keep_last, config_.ckpt.keep_every);
      !s.ok()) {
    spdlog::warn("checkpoint retention: {}", std::string(s.message()));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() -
      start;
  spdlog::info(
      "checkpoint {} written in {:.2f} s ({} in-flight samples; {} running agent episodes, {} "
      "of them to attach to again on resume)",
      *dir, seconds, (*meta)["inflight_samples"].get<int64_t>(),
      (*meta)["running_episodes"].get<int64_t>(), (*meta)["attachable_episodes"].get<int64_t>());
  return dir;
}

}  // namespace loom::train
