#include "loom/agent/episodes.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "loom/chat/special_tokens.h"
#include "loom/rpc/chat_bridge.h"

namespace loom::agent {
namespace {

std::vector<int64_t> Widen(const std::vector<int32_t>& ids) {
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// `text` with every byte that is not part of a well-formed UTF-8 character
// replaced by U+FFFD: an untrained model emits arbitrary bytes, and protobuf
// strings must be UTF-8.
std::string ValidUtf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xE  ? 3
                     : (c >> 3) == 0x1E ? 4
                                        : 0;
    bool ok = n > 0 && i + n <= text.size() && !(n == 2 && c < 0xC2);
    for (size_t k = 1; ok && k < n; ++k) {
      ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    }
    if (ok && n == 3) {
      const unsigned char d = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xE0 && d < 0xA0) && !(c == 0xED && d >= 0xA0);  // overlong, surrogate
    }
    if (ok && n == 4) {
      const unsigned char d = static_cast<unsigned char>(text[i + 1]);
      ok = c <= 0xF4 && !(c == 0xF0 && d < 0x90) && !(c == 0xF4 && d >= 0x90);
    }
    if (ok) {
      out.append(text, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace

AgentConversation::AgentConversation(const tokenizer::Tokenizer& tokenizer, int effort,
                                     int64_t eos_id)
    : tokenizer_(tokenizer), eos_id_(eos_id) {
  options_.thinking_mode = chat::ThinkingMode::kThinking;
  if (effort > 0) {
    options_.reasoning_effort.kind = chat::ReasoningEffort::Kind::kNumeric;
    options_.reasoning_effort.b = effort;
  }
}

absl::StatusOr<std::vector<int64_t>> AgentConversation::Observe(
    const v1::GenerateRequest& request) {
  std::vector<chat::Message> added;
  for (const v1::Message& m : request.append()) {
    absl::StatusOr<chat::Message> message = rpc::ToChatMessage(m);
    if (!message.ok()) return message.status();
    added.push_back(*std::move(message));
  }
  std::vector<int64_t> ids;
  if (messages_.empty()) {
    absl::StatusOr<std::vector<int32_t>> prompt = chat::EncodeIds(added, options_, tokenizer_);
    if (!prompt.ok()) return prompt.status();
    ids = Widen(*prompt);
  } else {
    absl::StatusOr<std::vector<int32_t>> next =
        chat::EncodeContinuation(messages_, added, options_, tokenizer_);
    if (!next.ok()) return next.status();
    if (needs_eos_) ids.push_back(eos_id_);
    const std::vector<int64_t> rest = Widen(*next);
    ids.insert(ids.end(), rest.begin(), rest.end());
  }
  messages_.insert(messages_.end(), added.begin(), added.end());
  if (ids.empty()) return absl::InvalidArgumentError("worker request appends nothing");
  return ids;
}

v1::GenerateReply AgentConversation::Reply(const std::string& completion, int turn) {
  v1::GenerateReply reply =
      rpc::ReplyFromCompletion(ValidUtf8(completion), options_.thinking_mode, turn);
  chat::Message assistant;
  assistant.role = chat::Role::kAssistant;
  if (reply.has_assistant()) {
    absl::StatusOr<chat::Message> parsed = rpc::ToChatMessage(reply.assistant());
    if (parsed.ok()) assistant = *std::move(parsed);
  }
  // An unparsable turn still sits in the token sequence; an empty assistant
  // message stands for it so the next observation encodes as a new user turn.
  messages_.push_back(std::move(assistant));
  needs_eos_ = !chat::EndsWithEos(completion);
  return reply;
}

AgentEpisodes::AgentEpisodes(rpc::WorkerPool& pool, const tokenizer::Tokenizer& tokenizer,
                             AgentOptions options)
    : pool_(pool), tokenizer_(tokenizer), options_(std::move(options)) {}

AgentEpisodes::~AgentEpisodes() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  reply_cv_.notify_all();
  pool_.CancelEpisodes();  // clients inside a tool call return now, not when it ends
  for (auto& [id, thread] : threads_) thread.join();
}

void AgentEpisodes::Start(uint64_t id, const v1::Task& task, int effort) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[id] = Slot();
  }
  ++inflight_;
  threads_.emplace(id, std::thread(&AgentEpisodes::RunClient, this, id, task, effort));
}

void AgentEpisodes::RunClient(uint64_t id, v1::Task task, int effort) {
  AgentConversation conversation(tokenizer_, effort, options_.eos_id);
  v1::RunEpisode episode;
  *episode.mutable_task() = std::move(task);
  *episode.mutable_options() = options_.scaffold;
  AgentEvent done;
  done.kind = AgentEvent::Kind::kDone;
  done.id = id;
  done.trajectory = pool_.RunEpisode(
      episode, [&](const v1::GenerateRequest& request) { return Turn(id, conversation, request); });
  Post(std::move(done));
}

absl::StatusOr<v1::GenerateReply> AgentEpisodes::Turn(uint64_t id, AgentConversation& conversation,
                                                      const v1::GenerateRequest& request) {
  absl::StatusOr<std::vector<int64_t>> tokens = conversation.Observe(request);
  if (!tokens.ok()) return tokens.status();
  AgentEvent event;
  event.kind = request.turn() == 0 ? AgentEvent::Kind::kPrompt : AgentEvent::Kind::kAppend;
  event.id = id;
  event.tokens = *std::move(tokens);
  Post(std::move(event));

  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::microseconds(static_cast<int64_t>(options_.turn_timeout_s * 1e6));
  std::unique_lock<std::mutex> lock(mu_);
  Slot& slot = slots_[id];
  const bool woken = reply_cv_.wait_until(
      lock, deadline, [&] { return stopping_ || slot.cut || slot.completion.has_value(); });
  if (!woken) {
    return absl::DeadlineExceededError(
        absl::StrCat("sample ", id, ": no generated turn within ", options_.turn_timeout_s, " s"));
  }
  if (stopping_) return absl::CancelledError("the trainer is stopping");
  if (slot.cut) {
    v1::GenerateReply stop;
    stop.set_stop(true);
    return stop;
  }
  std::string completion = *std::move(slot.completion);
  slot.completion.reset();
  lock.unlock();
  return conversation.Reply(completion, request.turn());
}

void AgentEpisodes::Post(AgentEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(std::move(event));
  }
  inbox_cv_.notify_one();
}

std::vector<AgentEvent> AgentEpisodes::Poll(double wait_s) {
  std::vector<AgentEvent> events;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (inbox_.empty() && wait_s > 0) {
      inbox_cv_.wait_for(lock, std::chrono::microseconds(static_cast<int64_t>(wait_s * 1e6)),
                         [&] { return !inbox_.empty(); });
    }
    events.assign(std::make_move_iterator(inbox_.begin()), std::make_move_iterator(inbox_.end()));
    inbox_.clear();
    for (const AgentEvent& event : events) {
      if (event.kind == AgentEvent::Kind::kDone) slots_.erase(event.id);
    }
  }
  for (const AgentEvent& event : events) {
    if (event.kind != AgentEvent::Kind::kDone) continue;
    auto thread = threads_.find(event.id);
    if (thread != threads_.end()) {
      thread->second.join();  // it posted kDone as its last act
      threads_.erase(thread);
    }
    --inflight_;
  }
  return events;
}

void AgentEpisodes::Answer(uint64_t id, std::string completion) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto slot = slots_.find(id);
    if (slot == slots_.end()) return;  // the episode already ended
    slot->second.completion = std::move(completion);
  }
  reply_cv_.notify_all();
}

void AgentEpisodes::Cut(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto slot = slots_.find(id);
    if (slot == slots_.end()) return;
    slot->second.cut = true;
  }
  reply_cv_.notify_all();
}

}  // namespace loom::agent
