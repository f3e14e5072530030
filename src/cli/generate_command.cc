// `loom generate --model DIR (--prompt TEXT | --messages FILE) [...]`: try a
// model by hand. Encodes the conversation in the DeepSeek-V4 format, decodes
// with the paged KV cache (temperature / top-p sampling, seeded), prints the
// completion text and then the parsed assistant message as JSON.

#include <iostream>
#include <memory>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "cli/command.h"
#include "cli/threads.h"
#include "loom/chat/encoder.h"
#include "loom/chat/parser.h"
#include "loom/config/files.h"
#include "loom/model/transformer.h"
#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  std::string messages;
  int64_t max_new_tokens = 64;
  double temperature = 1.0;
  double top_p = 1.0;
  uint64_t seed = 0;
  std::string effort;
  int threads = 0;
};

absl::StatusOr<std::vector<chat::Message>> ReadConversation(const GenerateOptions& o) {
  if (o.messages.empty()) {
    chat::Message user;
    user.content = o.prompt;
    return std::vector<chat::Message>{user};
  }
  auto text = ReadFile(o.messages);
  if (!text.ok()) return text.status();
  auto doc = chat::OrderedJson::parse(*text, nullptr, false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(o.messages + ": not JSON");
  auto messages = chat::ConversationFromJson(doc);
  if (!messages.ok()) {
    return absl::InvalidArgumentError(o.messages + ": " + std::string(messages.status().message()));
  }
  return messages;
}

// Temperature, then nucleus (top-p) sampling from `logits` [V] float32.
int64_t SampleToken(const at::Tensor& logits, double temperature, double top_p,
                    at::Generator& gen) {
  if (temperature <= 0) return logits.argmax().item<int64_t>();
  at::Tensor probs = at::softmax(logits / temperature, -1);
  auto [sorted, order] = probs.sort(-1, /*descending=*/true);
  at::Tensor keep = (sorted.cumsum(-1) - sorted) < top_p;  // always keeps the first
  sorted = sorted * keep;
  int64_t pick = at::multinomial(sorted, 1, false, gen).item<int64_t>();
  return order[pick].item<int64_t>();
}

absl::Status RunGenerate(const GenerateOptions& o) {
  SetComputeThreads(o.threads > 0 ? o.threads
                                  : static_cast<int>(std::thread::hardware_concurrency()));
  auto tok = tokenizer::Tokenizer::FromFile(o.model + "/tokenizer.json");
  if (!tok.ok()) return tok.status();
  auto messages = ReadConversation(o);
  if (!messages.ok()) return messages.status();
  chat::EncodeOptions encode;
  if (!o.effort.empty()) {
    auto effort = chat::ParseReasoningEffort(o.effort);
    if (!effort.ok()) return effort.status();
    encode.reasoning_effort = *effort;
  }
  auto ids = chat::EncodeIds(*messages, encode, **tok);
  if (!ids.ok()) return ids.status();
  auto model = model::Transformer::Load(o.model, {});
  if (!model.ok()) return model.status();
  model::KvBlockPool pool((*model)->PoolOptions(ids->size() + o.max_new_tokens + 1));
  model::KvSequence seq;
  std::vector<int64_t> next(ids->begin(), ids->end());
  std::vector<int32_t> completion;
  const auto eos = (*tok)->TokenToId(tokenizer::dsv4::kEos);
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    auto step = (*model)->Step({{&seq, next}}, pool);
    if (!step.ok()) return step.status();
    int64_t token = SampleToken(step->logits[0], o.temperature, o.top_p, gen);
    completion.push_back(static_cast<int32_t>(token));  // the end of sentence too: it parses
    if (eos && token == *eos) break;
    next = {token};
  }
  auto text = (*tok)->Decode(completion);
  if (!text.ok()) return text.status();
  std::cout << *text << "\n";
  auto parsed = chat::ParseCompletion(*text, encode.thinking_mode);
  if (parsed.ok()) {
    std::cout << chat::ParsedMessageToJson(*parsed).dump() << "\n";
  } else {
    std::cout << "{\"parse_error\": " << chat::OrderedJson(std::string(parsed.status().message()))
              << "}\n";
  }
  return absl::OkStatus();
}

void SetupGenerate(CLI::App& app, Context& context) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a completion from a model by hand");
  cmd->add_option("--model", o->model, "Model directory")->required();
  auto* prompt = cmd->add_option("--prompt", o->prompt, "User message text");
  auto* messages = cmd->add_option("--messages", o->messages, "Conversation JSON file");
  prompt->excludes(messages);
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->top_p, "Nucleus mass")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", o->seed, "Sampling seed");
  cmd->add_option(
      "--effort", o->effort,
      "Reasoning effort: 1..100, max (100), high (75), low (50), none, v4-max or v4-high");
  cmd->add_option("--threads", o->threads, "Intra-op CPU threads (0 = all cores)");
  cmd->callback([o, &context, prompt, messages] {
    if (prompt->count() == 0 && messages->count() == 0) {
      std::cerr << "generate: give --prompt or --messages\n";
      context.exit_code = kExitUsage;
      return;
    }
    absl::Status status = RunGenerate(*o);
    if (!status.ok()) std::cerr << "generate: " << status.message() << "\n";
    context.exit_code = StatusExitCode(status);
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("generate", SetupGenerate);

}  // namespace loom::cli
