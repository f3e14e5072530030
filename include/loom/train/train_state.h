#pragma once
// TrainState: what a checkpoint holds for a `loom train` run, and how it is
// laid out in a checkpoint directory.
//
//   model/                  the policy in the Hugging Face layout (config.json,
//                           model.safetensors, tokenizer.json): `loom logprobs`,
//                           `loom merge` and HF tools load it as it is
//   optimizer.safetensors   AdamW::StateDict() of the current stage
//   rng.safetensors         LibTorch's default CPU generator state
//   state.json              stage, step, policy and config versions, the SFT data
//                           cursor, the dispatcher state and each sample's entry
//                           (SampleEntryJson) with its running episode's record
//   samples.json            every in-flight and finished-but-untrained sample's
//   samples.safetensors     SampleState (tokens, log-probs, versions, routing, RNG, KV)
//   config.yaml             the resolved config the run was started with
//
// Every file is listed with its size and CRC-32 in manifest.json (ckpt module).
// Reading checks every field: a malformed or mismatched file is a DATA_LOSS /
// FAILED_PRECONDITION status naming the file and field. Plain values; the run
// loop owns them.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/config/run_config.h"
#include "loom/model/safetensors.h"
#include "loom/model/transformer.h"
#include "loom/rollout/sample_state.h"
#include "loom/train/sample_table.h"

namespace loom::train {

// Where the run stands.
struct RunCursor {
  int stage_index = 0;         // into config.train.stages
  std::string stage;           // its name ("sft", "grpo"), checked on resume
  int64_t step = 0;            // optimizer steps done in that stage
  int64_t policy_version = 0;  // optimizer steps done in the whole run
  int64_t config_version = 0;  // live reconfigurations applied so far
  nlohmann::json live;         // LiveConfig::State() of that version; null: the file's values
};

// The SFT data cursor: the sampler's random state and per-dataset index.
struct SftCursor {
  std::string rng;                   // std::mt19937_64 state, as its operator<< writes it
  std::vector<uint64_t> next_index;  // next training problem per dataset
};

// An async stage's loop (grpo, opd) between two engine steps.
struct GrpoCursor {
  nlohmann::json dispatcher;  // Dispatcher::ExportState()
  // The loop's sample table in id order: a finished sample holds its state;
  // `problem` is left out (a resumed loop rebuilds it from the dataset).
  std::vector<SampleEntry> samples;
  std::vector<rollout::SampleState> inflight;  // exported from the engine (KV on host), id order
  // Running agent episodes on leased sessions, by sample id:
  // agent::EpisodeRecordJson (where it runs, its turns). A resumed run
  // attaches to them again; an agent sample without one starts again.
  std::map<uint64_t, nlohmann::json> episodes;
  int64_t prefill_tokens = 0;  // rollout work since the last optimizer step
  int64_t decode_tokens = 0;

  size_t finished() const;  // samples holding their state
};

// Resuming an async stage on another number of ranks than wrote the
// checkpoint: how this rank's loop picks up (set by the Checkpointer on
// reading, never written).
struct RankChange {
  int written_ranks = 1;
  // Dispatcher states of the ranks that are gone whose samples this rank
  // took over (rank g goes to rank g mod world); their samples and records
  // are already in this rank's GrpoCursor.
  std::vector<int> adopted_ranks;
  std::vector<nlohmann::json> adopted;
  // Dispatcher state of the rank furthest along the prompt stream: every
  // rank continues the stream from there.
  nlohmann::json stream;
};

struct TrainState {
  RunCursor cursor;
  model::TensorMap optimizer;  // AdamW::StateDict()
  std::optional<SftCursor> sft;
  std::optional<GrpoCursor> grpo;
  std::optional<RankChange> rank_change;
};

// Writes `state`, the model (with `tokenizer_json` copied beside it), the
// LibTorch RNG and `config` into `dir` (a CheckpointWriter's temporary
// directory). Returns the manifest metadata (stage, step, versions,
// inflight_samples, ...).
absl::StatusOr<nlohmann::json> WriteTrainState(const TrainState& state,
                                               const model::Transformer& model,
                                               const std::string& tokenizer_json,
                                               const config::RunConfig& config,
                                               const std::string& dir);

// Reads everything but the model (load dir/model with Transformer::Load).
absl::StatusOr<TrainState> ReadTrainState(const std::string& dir);

// A multi-rank checkpoint of an async stage holds, beside rank 0's whole
// state, each other rank's loop under ranks/rank<r>/: its in-flight and
// finished samples and its dispatcher (state.json and samples), no model or
// optimizer (rank 0's are every rank's). WriteRankState writes that into
// `dir`; ReadRankState reads it back (DATA_LOSS naming the file).
absl::Status WriteRankState(const TrainState& state, const std::string& dir);
absl::StatusOr<GrpoCursor> ReadRankState(const std::string& dir);
// Only the dispatcher state of the loop in `dir` (rank 0's checkpoint
// directory or a rank's share), without its samples.
absl::StatusOr<nlohmann::json> ReadDispatcherState(const std::string& dir);

// Restores the LibTorch default CPU generator from dir/rng.safetensors.
absl::Status RestoreTorchRng(const std::string& dir);

}  // namespace loom::train
