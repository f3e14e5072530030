#pragma once
// RolloutEngine: continuous-batching generation inside the trainer process,
// built for interruption and persistence.
//
// Samples join (Add, Import) and leave (finish, Drop, Export) at any step.
// Each Step() admits waiting samples while the batch and the KV pool have
// room, feeds every running sample its pending tokens — a prompt chunk under
// the step's token budget, or the one token decoded last step — in
// Transformer::Step calls (decoding samples in one, prompt chunks in another,
// so short rows are not padded to long ones), then samples one token for each
// sample whose pending tokens are all in the cache. Every generated token records its behaviour
// log-prob, the policy version and (for MoE models) the routing.
//
// A sample's pending tokens are tokens[kv_length, T): one per step while
// decoding, the prompt when new, only the appended tokens after Append, and
// the whole sequence after its KV was dropped (preemption by recompute, or
// on_weight_update = recompute). There is no other path: resume, multi-turn
// and re-prefill are the same mechanism.
//
// KV memory (sample-grained GC): a sample's blocks are returned to the pool
// the moment it finishes, is dropped or is exported. Admission waits until the
// pool holds the sample's whole sequence. A running sample that cannot get a
// block preempts the most recently added running sample (possibly itself):
// PreemptionPolicy::kRecompute frees its blocks (re-prefilled when
// re-admitted), kSwap copies its KV to host memory first (copied back when
// re-admitted). Samples waiting for tool results give up their device KV the
// same way when nothing else can make room. A sample too long for the whole
// pool finishes with kContextLimit. Never an abort, never a deadlock.
//
// Prefix sharing (options.prefix_cache): full KV blocks a sample has
// computed are published to the pool's prefix index as they fill, stamped
// with the oldest policy version in its KV. A sample admitted with no KV
// (new, or preempted by recompute) first takes the longest published chain
// matching its tokens whose stamps are at most prefix_max_version_lag versions
// old, and feeds only the rest; when every token matched, the last one is fed
// again (copy on write of its block) for the logits. A sample whose prompt
// shares more full blocks with a running sample still prefilling them waits
// for that sample instead of computing them a second time; later samples in
// the queue are admitted past it meanwhile. With prefix_keep_released, blocks
// no sample holds stay cached inside the pool's capacity and are evicted least
// recently used; without it a block is shared only while a sample holds it,
// which keeps the engine's whole state in its samples: a sample that comes
// back from host memory (swap, offload, export and import) takes again the
// published blocks that hold its KV bit for bit and republishes what it had
// published, so the engine continues exactly as if the KV had stayed. For MoE
// models the routing of each published block is kept with it and copied to
// the samples that take it.
//
// Interruption: RequestInterrupt() (any thread) makes the engine park at the
// next token boundary: at the end of the Step in progress, or at the start of
// the next one — at most one decode step of latency. Parked samples keep
// their state and KV; Step() does nothing while parked. The run loop then
// changes the weights in place and calls Resume(new_version): with
// on_weight_update = keep each sample continues on its KV cache as it is (no
// re-prefill; only new tokens get the new version), with recompute its KV is
// dropped and the whole sequence re-prefilled with the new weights.
//
// Threads: every method except RequestInterrupt() and interrupt_requested()
// must be called from one thread (the run loop). The model is borrowed and
// must outlive the engine; nothing may change its weights during Step().

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/model/kv_pool.h"
#include "loom/model/transformer.h"
#include "loom/rollout/sample_state.h"

namespace loom::config {
struct RolloutSection;
}

namespace loom::rollout {

enum class WeightUpdatePolicy { kKeep, kRecompute };
enum class PreemptionPolicy { kRecompute, kSwap };

struct EngineOptions {
  int64_t max_batch = 64;            // running samples at once
  int64_t step_token_budget = 2048;  // tokens fed per Step (decode tokens first)
  int64_t block_size = 16;           // tokens per KV block
  int64_t pool_tokens = 65536;       // KV capacity (rounded up to whole blocks)
  uint64_t seed = 0;                 // run seed; each sample's RNG is (seed, sample id)
  int64_t initial_version = 0;       // policy version of the weights at construction
  WeightUpdatePolicy on_weight_update = WeightUpdatePolicy::kKeep;
  PreemptionPolicy preemption = PreemptionPolicy::kRecompute;
  bool prefix_cache = false;           // share the KV blocks of common token prefixes
  int64_t prefix_max_version_lag = 0;  // how many versions old a reused block may be
  bool prefix_keep_released = false;   // keep blocks no sample holds cached for later ones
};

// Options from the `rollout:` config section and the run seed.
EngineOptions EngineOptionsFromConfig(const config::RolloutSection& section, uint64_t seed);

// What one Step did.
struct StepStats {
  int64_t prefill_tokens = 0;       // tokens fed that produced no new token
  int64_t decode_tokens = 0;        // tokens sampled
  int64_t batch = 0;                // samples fed
  int64_t preempted = 0;            // samples preempted to make room
  int64_t prefix_hit_tokens = 0;    // tokens admitted samples took from the prefix cache
  std::vector<uint64_t> finished;   // ids that finished (collect with TakeFinished)
  std::vector<uint64_t> tool_wait;  // ids that stopped at a tool-call end
  bool parked = false;              // the engine is parked after this call
};

// Totals since construction.
struct EngineCounters {
  int64_t steps = 0;           // Steps that fed the model
  int64_t prefill_tokens = 0;  // includes re-prefills
  int64_t decode_tokens = 0;
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;  // tokens taken from the prefix cache instead of prefilled
  int64_t interrupts = 0;
  int64_t last_interrupt_steps = 0;  // Steps completed between request and park (0 or 1)
  double last_interrupt_ms = 0.0;    // wall time between request and park
};

class RolloutEngine {
 public:
  // Creates the KV pool for `model` (its dtype and device). INVALID_ARGUMENT
  // for non-positive sizes.
  static absl::StatusOr<std::unique_ptr<RolloutEngine>> Create(const model::Transformer& model,
                                                               const EngineOptions& options);
  ~RolloutEngine();
  RolloutEngine(const RolloutEngine&) = delete;
  RolloutEngine& operator=(const RolloutEngine&) = delete;

  // Queues a new sample. INVALID_ARGUMENT: empty prompt, a token id outside
  // the vocabulary, bad sampling or stop values, a prompt at the context limit;
  // ALREADY_EXISTS: the id is in the engine.
  absl::Status Add(const SampleRequest& request);

  // One engine step (see the file comment). While parked: does nothing and
  // returns parked = true. A model failure is returned as its status with
  // every sample as it was before the call.
  absl::StatusOr<StepStats> Step();

  // Removes and returns finished samples, in finishing order.
  std::vector<SampleState> TakeFinished();

  // Adds environment tokens (loss_mask 0) to a sample in kToolWait and makes it
  // run again: only `tokens` (and its last generated token) are prefilled.
  // NOT_FOUND / FAILED_PRECONDITION (not waiting for a tool) / INVALID_ARGUMENT.
  absl::Status Append(uint64_t id, const std::vector<int64_t>& tokens);

  // Removes a sample in any phase, freeing its KV; finish = kDropped unless
  // it had already finished. NOT_FOUND for an unknown id.
  absl::StatusOr<SampleState> Drop(uint64_t id);

  // Thread-safe: ask the engine to park at the next token boundary.
  void RequestInterrupt();
  bool interrupt_requested() const { return interrupt_requested_.load(); }
  // Parks now (the run loop's own decision; it is already at a boundary).
  void ParkAll();
  bool parked() const { return parked_; }
  // Leaves the parked state under `policy_version` (>= the current one). If
  // the version changed and the policy is recompute (`policy` overrides the
  // option), every sample's KV is dropped for a re-prefill.
  absl::Status Resume(int64_t policy_version,
                      std::optional<WeightUpdatePolicy> policy = std::nullopt);

  // Parked and tool-waiting samples copy their KV to host memory and free
  // their blocks (e.g. before training); it comes back on admission.
  void OffloadParked();

  // Moves a sample out of the engine with its KV as a host snapshot. Allowed
  // for samples not running (waiting, parked, tool-wait, finished);
  // FAILED_PRECONDITION for a running one (park first), NOT_FOUND otherwise.
  absl::StatusOr<SampleState> Export(uint64_t id);
  // Moves an exported sample in. A tool-waiting sample stays waiting for
  // Append; others queue for admission and continue where they were (their
  // KV copied back into the pool, no re-prefill). INVALID_ARGUMENT when the
  // state does not fit this model (vocab, routing shape, KV shape);
  // ALREADY_EXISTS for a duplicate id.
  absl::Status Import(SampleState state);

  // Read-only views.
  const SampleState* Find(uint64_t id) const;
  // Tokens of sample `id` whose KV is in the pool (-1 for an unknown id).
  int64_t CachedTokens(uint64_t id) const;
  // The KV block table of `id` (empty when it holds none).
  std::vector<int32_t> BlockTable(uint64_t id) const;
  int64_t num_samples() const { return static_cast<int64_t>(samples_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t policy_version() const { return version_; }
  // Tokens held in the pool by all samples (theoretical KV need, in tokens).
  int64_t CachedTokensTotal() const;
  const model::KvBlockPool& pool() const { return *pool_; }
  const EngineCounters& counters() const { return counters_; }
  const EngineOptions& options() const { return options_; }

 private:
  struct Sample;
  struct Plan;
  RolloutEngine(const model::Transformer& model, const EngineOptions& options);

  void Admit();
  bool TryAdmit(Sample& sample);
  bool WaitsForPrefix(const Sample& sample) const;
  void AcquirePrefix(Sample& sample);
  int64_t MinPrefixVersion() const { return version_ - options_.prefix_max_version_lag; }
  bool MakeRoomForWaiting(int64_t blocks_needed);
  std::vector<Plan> PlanBatch();
  int64_t ReserveOrPreempt(std::vector<Plan>& plan);
  absl::Status RunModel(const std::vector<Plan>& plan, StepStats& stats);
  void Preempt(Sample& sample);
  void EvictKv(Sample& sample, PreemptionPolicy policy);
  void ApplyResults(const std::vector<Plan>& plan, const model::StepResult& result,
                    StepStats& stats);
  void RecordRouting(Sample& sample, int64_t begin, int64_t count, const at::Tensor& routing,
                     int64_t first_row);
  void AfterToken(Sample& sample, StepStats& stats);
  void Finish(Sample& sample, FinishReason reason, StepStats& stats);
  void Enqueue(Sample& sample);
  void RemoveFromQueues(Sample& sample);
  void NoteParked();
  int64_t ContextLimit(const SampleState& state) const;
  absl::Status ValidateTokens(const std::vector<int64_t>& tokens, const char* what) const;

  const model::Transformer& model_;
  EngineOptions options_;
  std::unique_ptr<model::KvBlockPool> pool_;
  std::unordered_map<uint64_t, std::unique_ptr<Sample>> samples_;
  std::vector<Sample*> running_;  // in arrival order
  std::deque<Sample*> waiting_;   // in arrival order
  std::vector<uint64_t> finished_order_;
  uint64_t next_arrival_ = 0;
  int64_t version_ = 0;
  bool parked_ = false;
  EngineCounters counters_;

  // Makes (steps completed, request) one consistent observation, so a step
  // finishing while a request is being made is not counted as latency.
  std::mutex interrupt_mu_;
  std::atomic<bool> interrupt_requested_{false};
  std::atomic<int64_t> interrupt_step_{0};  // counters_.steps when requested
  std::atomic<int64_t> interrupt_time_ns_{0};
  std::atomic<int64_t> steps_done_{0};
};

}  // namespace loom::rollout
