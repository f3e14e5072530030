#pragma once
// HarnessEpisodes: training episodes run by external harnesses (harness.h).
// Each episode runs on a thread of its own, from its sandbox session's open
// to its verdict; the harness's model calls are served by sessions of one
// Endpoint over a TurnRunner that generates with the policy's weights on an
// engine of its own, every call of every running episode in one continuous
// batch. An ended episode waits, with its session's record (the segments: its
// training sequences), until Take.
//
// Around a weight update the trainer calls Pause (no forward pass touches the
// weights until Resume) and Resume at the new policy version: a call being
// generated then goes on, and every held conversation keeps its KV, exactly
// as the loop's own samples do; the harness only sees a slower model.
//
// Threads: Start, Take, Pause, Resume and inflight from one thread (the run
// loop's); the destructor cancels the episodes still running and waits for
// their threads.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/agent/harness.h"
#include "loom/model/transformer.h"
#include "loom/rpc/worker_pool.h"
#include "loom/serve/endpoint.h"
#include "loom/serve/turn_runner.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::agent {

class HarnessEpisodes {
 public:
  // `engine`: the model calls' engine (its initial_version the policy's
  // version now). Errors: the engine or the endpoint could not start.
  static absl::StatusOr<std::unique_ptr<HarnessEpisodes>> Create(
      const model::Transformer& model, const tokenizer::Tokenizer& tokenizer,
      const rollout::EngineOptions& engine, const rpc::PoolOptions& pool);
  ~HarnessEpisodes();
  HarnessEpisodes(const HarnessEpisodes&) = delete;
  HarnessEpisodes& operator=(const HarnessEpisodes&) = delete;

  // Starts episode `id` (unique among the running ones): `task` under `harness`.
  void Start(uint64_t id, HarnessSpec harness, v1::Task task, HarnessEpisodeOptions options);
  // The episodes that ended since the last call, waiting up to `wait_s` for one.
  std::vector<std::pair<uint64_t, HarnessEpisode>> Take(double wait_s);
  int64_t inflight() const;

  void Pause() { runner_->Pause(); }
  absl::Status Resume(int64_t policy_version) { return runner_->Resume(policy_version); }

 private:
  explicit HarnessEpisodes(rpc::PoolOptions pool) : pool_(std::move(pool)) {}
  struct Running {
    std::thread thread;
    EpisodeCancel cancel;
  };

  rpc::WorkerPool pool_;  // a pool of its own: the harness episodes' sessions
  std::unique_ptr<serve::TurnRunner> runner_;
  std::unique_ptr<serve::Endpoint> endpoint_;
  mutable std::mutex mu_;
  std::condition_variable ended_changed_;
  std::map<uint64_t, std::unique_ptr<Running>> running_;   // guarded by mu_
  std::deque<std::pair<uint64_t, HarnessEpisode>> ended_;  // guarded by mu_
};

}  // namespace loom::agent
