#pragma once
// TurnRunner: the rollout engine (rollout/engine.h) on a thread of its own,
// generating the assistant turns of concurrent HTTP requests in one
// continuous batch. A request thread Begin()s a turn on a new sample, or
// Continue()s a held one, reads its tokens as they come with Wait(), and
// Cancel()s it when its client hangs up; every turn ends exactly once (done).
//
// A turn ends at EOS or the end of a tool-call block (the sample's stop
// rules), at max_new_tokens or the context limit, or by Cancel(). A turn
// whose sample stops in the engine's tool wait leaves the sample *held*: its
// tokens and KV stay for a later Continue(), which appends the next messages'
// tokens and generates on from there without re-prefilling anything, until
// Release() drops it. Other ends free the sample's KV at once. Every
// generated token keeps its behaviour log-prob.
//
// A sample begun with `keep` leaves its final state (tokens, loss mask,
// log-probs, policy versions: a training sequence) for TakeEnded() when it
// ends, however it ends.
//
// Threads: Begin, Continue, Release, Wait, Cancel and TakeEnded are thread-safe. The
// model is borrowed and must outlive the runner; the destructor ends every
// open turn (cancelled) and joins the engine thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/model/transformer.h"
#include "loom/rollout/engine.h"

namespace loom::serve {

// One turn's tokens as they are generated (Wait returns only the new ones).
struct TurnProgress {
  std::vector<int64_t> tokens;  // [n] generated ids
  std::vector<float> logprobs;  // [n] their behaviour log-probs
  int64_t context = 0;          // the sample's tokens before this turn generated (0 until admitted)
  bool done = false;
  bool held = false;  // when done: the sample waits for Continue() or Release()
  rollout::FinishReason finish = rollout::FinishReason::kNone;  // when done
  absl::Status status;  // a refused request or a model failure ends the turn with its status
};

class TurnRunner {
 public:
  class Turn;

  static absl::StatusOr<std::unique_ptr<TurnRunner>> Start(const model::Transformer& model,
                                                           const rollout::EngineOptions& options);
  ~TurnRunner();
  TurnRunner(const TurnRunner&) = delete;
  TurnRunner& operator=(const TurnRunner&) = delete;

  // Queues a turn on a new sample (its id is assigned here). A request the
  // engine refuses (RolloutEngine::Add) ends the turn at once with that status.
  // With `keep`, the sample's final state waits for TakeEnded().
  std::shared_ptr<Turn> Begin(rollout::SampleRequest request, bool keep = false);
  // Queues a turn on held sample `sample`: `tokens` (loss mask 0) are
  // appended, then it generates. NOT_FOUND / FAILED_PRECONDITION from the
  // engine end the turn at once (the sample was released or is not held).
  std::shared_ptr<Turn> Continue(uint64_t sample, std::vector<int64_t> tokens);
  // Drops held sample `sample` and frees its KV (nothing if it is not there).
  void Release(uint64_t sample);
  // Blocks until `turn` has more than `seen` tokens, has ended, or `timeout`
  // passed; returns its tokens after the first `seen`, and whether it ended.
  TurnProgress Wait(Turn& turn, size_t seen, std::chrono::milliseconds timeout);
  // Ends the turn (finish kDropped) unless it ended already. Returns at once.
  void Cancel(Turn& turn);
  // The final state of kept sample `sample` once it has ended (waits up to
  // `timeout` for that); null when the engine refused it, it is unknown, or
  // it has not ended in time. Each state is taken once.
  std::unique_ptr<rollout::SampleState> TakeEnded(uint64_t sample,
                                                  std::chrono::milliseconds timeout);
  // Keeps no final state of `sample` (one nobody will take).
  void Forget(uint64_t sample);

  // For a weight update of the borrowed model (training through harnesses):
  // Pause returns once the engine thread is parked between steps and will
  // not touch the model; turns asked for meanwhile wait. Resume goes on
  // under `policy_version`, every sample on its KV as it is (the engine's
  // on_weight_update). One Pause, then one Resume, from one thread.
  void Pause();
  absl::Status Resume(int64_t policy_version);

 private:
  explicit TurnRunner(std::unique_ptr<rollout::RolloutEngine> engine);
  std::shared_ptr<Turn> Queue(std::shared_ptr<Turn> turn);  // for the engine thread to admit
  void Loop();
  // Engine thread: some sample needs a step (the held ones only wait).
  bool Runnable() const;
  // Engine thread: takes queued turns into the engine, drops cancelled turns
  // and released samples; false when the runner stops.
  bool AdmitAndCancel();
  // Engine thread, `lock` on mu_: parks the engine while a pause lasts.
  void HoldWhilePaused(std::unique_lock<std::mutex>& lock);
  void Admit(Turn& turn);
  // Engine thread: one engine step, then every open turn's new tokens.
  void StepAndPublish();
  void End(Turn& turn, const rollout::SampleState* state, rollout::FinishReason finish,
           absl::Status status, bool held = false);
  // Engine thread: sample `sample` left the engine (`state` null when it
  // never entered); a kept one's state waits for TakeEnded.
  void Ended(uint64_t sample, const rollout::SampleState* state);
  // Engine thread: drops `sample` from the engine, freeing its KV, and
  // reports it Ended; its final state, or none when the engine had no such
  // sample.
  std::optional<rollout::SampleState> Drop(uint64_t sample);

  std::unique_ptr<rollout::RolloutEngine> engine_;  // engine thread only
  std::atomic<uint64_t> next_turn_{0};
  std::atomic<uint64_t> next_sample_{0};
  std::mutex mu_;
  std::condition_variable work_;
  bool stopping_ = false;  // guarded by mu_
  // Pause asked; the engine thread parked; the version to resume at.
  bool pause_ = false, paused_ = false;             // guarded by mu_
  int64_t resume_version_ = 0;                      // guarded by mu_
  absl::Status resumed_;                            // the engine's Resume; guarded by mu_
  std::deque<std::shared_ptr<Turn>> incoming_;      // guarded by mu_
  std::vector<uint64_t> releases_;                  // samples to drop; guarded by mu_
  std::map<uint64_t, std::shared_ptr<Turn>> open_;  // by sample; guarded by mu_
  std::set<uint64_t> held_;  // samples in tool wait with no open turn; engine thread
  std::set<uint64_t> kept_;  // samples whose end state is kept; guarded by mu_
  // Kept samples that ended, with their final state (null: never admitted).
  std::map<uint64_t, std::unique_ptr<rollout::SampleState>> ended_;  // guarded by mu_
  std::condition_variable ended_changed_;
  std::thread thread_;
};

class TurnRunner::Turn {
 public:
  uint64_t id() const { return id_; }          // the turn's number, in start order
  uint64_t sample() const { return sample_; }  // the engine sample it generates on

 private:
  friend class TurnRunner;
  Turn(uint64_t id, uint64_t sample) : id_(id), sample_(sample) {}

  const uint64_t id_;
  const uint64_t sample_;
  rollout::SampleRequest request_;  // a new sample's request (Begin)
  std::vector<int64_t> append_;     // the tokens to append first (Continue)
  bool continues_ = false;
  int64_t start_ = 0;  // where this turn's tokens begin in the sample; engine thread
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  std::condition_variable changed_;
  TurnProgress progress_;  // guarded by mu_
};

}  // namespace loom::serve
