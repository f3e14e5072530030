#include "loom/agent/harness_episodes.h"

#include <chrono>

namespace loom::agent {

absl::StatusOr<std::unique_ptr<HarnessEpisodes>> HarnessEpisodes::Create(
    const model::Transformer& model, const tokenizer::Tokenizer& tokenizer,
    const rollout::EngineOptions& engine, const rpc::PoolOptions& pool) {
  std::unique_ptr<HarnessEpisodes> episodes(new HarnessEpisodes(pool));
  auto runner = serve::TurnRunner::Start(model, engine);
  if (!runner.ok()) return runner.status();
  episodes->runner_ = *std::move(runner);
  serve::EndpointOptions options;
  options.context_window = model.config().max_position_embeddings;
  auto endpoint = serve::Endpoint::Create(tokenizer, *episodes->runner_, options);
  if (!endpoint.ok()) return endpoint.status();
  episodes->endpoint_ = *std::move(endpoint);
  return episodes;
}

HarnessEpisodes::~HarnessEpisodes() {
  std::map<uint64_t, std::unique_ptr<Running>> running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, episode] : running_) episode->cancel.Cancel();
    running.swap(running_);
  }
  for (auto& [id, episode] : running) episode->thread.join();
}

void HarnessEpisodes::Start(uint64_t id, HarnessSpec harness, v1::Task task,
                            HarnessEpisodeOptions options) {
  auto running = std::make_unique<Running>();
  options.cancel = &running->cancel;
  std::lock_guard<std::mutex> lock(mu_);
  Running& slot = *running_.emplace(id, std::move(running)).first->second;
  slot.thread = std::thread([this, id, harness = std::move(harness), task = std::move(task),
                             options = std::move(options)] {
    HarnessEpisode episode = RunHarnessEpisode(pool_, *endpoint_, harness, task, options);
    std::lock_guard<std::mutex> lock(mu_);
    ended_.emplace_back(id, std::move(episode));
    ended_changed_.notify_all();
  });
}

std::vector<std::pair<uint64_t, HarnessEpisode>> HarnessEpisodes::Take(double wait_s) {
  std::vector<std::pair<uint64_t, HarnessEpisode>> ended;
  std::vector<std::unique_ptr<Running>> finished;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!running_.empty()) {
      ended_changed_.wait_for(lock, std::chrono::duration<double>(wait_s),
                              [&] { return !ended_.empty(); });
    }
    for (auto& entry : ended_) {
      auto it = running_.find(entry.first);
      finished.push_back(std::move(it->second));
      running_.erase(it);
      ended.push_back(std::move(entry));
    }
    ended_.clear();
  }
  for (auto& episode : finished) episode->thread.join();  // it has only the lock's release left
  return ended;
}

int64_t HarnessEpisodes::inflight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(running_.size());
}

}  // namespace loom::agent
