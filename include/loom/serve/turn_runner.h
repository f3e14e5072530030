#pragma once
// TurnRunner: the rollout engine (rollout/engine.h) on a thread of its own,
// generating the assistant turns of concurrent HTTP requests in one
// continuous batch. A request thread Begin()s a turn, reads its tokens as
// they come with Wait(), and Cancel()s it when its client hangs up; every
// turn ends exactly once (done), and its KV blocks go back to the pool then.
//
// A turn ends at EOS, at the end of a tool-call block, at max_new_tokens or
// the context limit, or by Cancel(). Every generated token keeps its
// behaviour log-prob.
//
// Threads: Begin, Wait and Cancel are thread-safe. The model is borrowed and
// must outlive the runner; the destructor ends every open turn (cancelled)
// and joins the engine thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
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
  bool done = false;
  rollout::FinishReason finish = rollout::FinishReason::kNone;  // when done
  absl::Status status;  // a model failure ends the turn with its status
};

class TurnRunner {
 public:
  class Turn;

  static absl::StatusOr<std::unique_ptr<TurnRunner>> Start(const model::Transformer& model,
                                                           const rollout::EngineOptions& options);
  ~TurnRunner();
  TurnRunner(const TurnRunner&) = delete;
  TurnRunner& operator=(const TurnRunner&) = delete;

  // Queues a turn (its id is assigned here). A request the engine refuses
  // (RolloutEngine::Add) ends the turn at once with that status.
  std::shared_ptr<Turn> Begin(rollout::SampleRequest request);
  // Blocks until `turn` has more than `seen` tokens, has ended, or `timeout`
  // passed; returns its tokens after the first `seen`, and whether it ended.
  TurnProgress Wait(Turn& turn, size_t seen, std::chrono::milliseconds timeout);
  // Ends the turn (finish kDropped) unless it ended already. Returns at once.
  void Cancel(Turn& turn);

 private:
  explicit TurnRunner(std::unique_ptr<rollout::RolloutEngine> engine);
  void Loop();
  // Engine thread: takes queued turns into the engine and drops cancelled
  // ones; false when the runner stops.
  bool AdmitAndCancel();
  // Engine thread: one engine step, then every open turn's new tokens.
  void StepAndPublish();
  void End(Turn& turn, const rollout::SampleState* state, rollout::FinishReason finish,
           absl::Status status);

  std::unique_ptr<rollout::RolloutEngine> engine_;  // engine thread only
  std::atomic<int64_t> next_id_{0};
  std::mutex mu_;
  std::condition_variable work_;
  bool stopping_ = false;                           // guarded by mu_
  std::deque<std::shared_ptr<Turn>> incoming_;      // guarded by mu_
  std::map<uint64_t, std::shared_ptr<Turn>> open_;  // guarded by mu_
  std::thread thread_;
};

class TurnRunner::Turn {
 public:
  uint64_t id() const { return request_.id; }
  int64_t prompt_tokens() const { return static_cast<int64_t>(request_.prompt.size()); }

 private:
  friend class TurnRunner;
  explicit Turn(rollout::SampleRequest request) : request_(std::move(request)) {}

  rollout::SampleRequest request_;
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  std::condition_variable changed_;
  TurnProgress progress_;  // guarded by mu_
};

}  // namespace loom::serve
