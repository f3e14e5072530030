#include "loom/algo/judge.h"

#include "loom/chat/parser.h"

namespace loom::algo {

Judgement JudgeCompletion(const tasks::Problem& problem, const std::vector<int64_t>& completion,
                          const tokenizer::Tokenizer& tokenizer) {
  Judgement judgement;
  auto text = tokenizer.Decode(std::vector<int32_t>(completion.begin(), completion.end()));
  if (!text.ok()) {
    judgement.parse_error = std::string(text.status().message());
    return judgement;
  }
  auto message = chat::ParseCompletion(*text, chat::ThinkingMode::kThinking);
  if (!message.ok()) {
    judgement.parse_error = std::string(message.status().message());
    return judgement;
  }
  judgement.parsed = true;
  judgement.content = message->content;
  judgement.reward = problem.Score(message->content);
  return judgement;
}

Rewards RewardBatch(const std::vector<Verdict>& verdicts, const EffortLengthReward* length) {
  Rewards rewards;
  for (const Verdict& verdict : verdicts) {
    const double r_len =
        length != nullptr ? length->Reward(verdict.effort, verdict.reasoning_tokens) : 0.0;
    rewards.task.push_back(static_cast<float>(verdict.judgement.reward));
    rewards.length.push_back(static_cast<float>(r_len));
    rewards.total.push_back(static_cast<float>(verdict.judgement.reward + r_len));
  }
  return rewards;
}

int64_t MultiTurnReasoningLength(const std::vector<int64_t>& tokens,
                                 const std::vector<uint8_t>& loss_mask, int64_t begin,
                                 int64_t think_end_id) {
  int64_t count = 0;
  bool in_turn = false, reasoning = false;
  for (size_t t = static_cast<size_t>(begin); t < tokens.size(); ++t) {
    if (!loss_mask[t]) {
      in_turn = false;
      continue;
    }
    if (!in_turn) in_turn = reasoning = true;
    if (tokens[t] == think_end_id) {
      reasoning = false;
    } else if (reasoning) {
      ++count;
    }
  }
  return count;
}

}  // namespace loom::algo
