// `loom chat encode` and `loom chat parse`: the DeepSeek-V4 chat format.
//   encode --messages FILE [--thinking-mode thinking|chat]
//          [--reasoning-effort N|max|high|low|none|v4-max|v4-high] [--no-drop-thinking] [--no-bos]
//          [--tokenizer FILE]
//     FILE: a JSON array of OpenAI-style messages, or {"messages", "tools"}.
//     Prints the prompt with no trailing newline (with --tokenizer: its ids
//     as one JSON array). Exit 2 on a malformed file or message.
//   parse --completion FILE --thinking-mode thinking|chat
//     Prints the parsed message as JSON. A malformed completion exits 3 with
//     "parse error: <reason>" on stderr.

#include <iostream>
#include <memory>

#include "cli/command.h"
#include "loom/chat/encoder.h"
#include "loom/chat/parser.h"
#include "loom/config/files.h"

namespace loom::cli {
namespace {

constexpr int kExitParseError = 3;

struct ChatOptions {
  std::string messages, completion, thinking_mode = "thinking", effort, tokenizer;
  bool no_drop_thinking = false, no_bos = false;
};

chat::ThinkingMode Mode(const std::string& name) {
  return name == "chat" ? chat::ThinkingMode::kChat : chat::ThinkingMode::kThinking;
}

absl::StatusOr<std::vector<chat::Message>> LoadMessages(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  chat::OrderedJson doc = chat::OrderedJson::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(path + ": not valid JSON");
  absl::StatusOr<std::vector<chat::Message>> messages = chat::ConversationFromJson(doc);
  if (!messages.ok()) {
    return absl::InvalidArgumentError(path + ": " + std::string(messages.status().message()));
  }
  return messages;
}

absl::Status PrintEncoding(const ChatOptions& o) {
  absl::StatusOr<std::vector<chat::Message>> messages = LoadMessages(o.messages);
  if (!messages.ok()) return messages.status();
  absl::StatusOr<chat::ReasoningEffort> effort = chat::ParseReasoningEffort(o.effort);
  if (!effort.ok()) return effort.status();
  chat::EncodeOptions options;
  options.thinking_mode = Mode(o.thinking_mode);
  options.drop_thinking = !o.no_drop_thinking;
  options.add_bos = !o.no_bos;
  options.reasoning_effort = *effort;
  if (o.tokenizer.empty()) {
    absl::StatusOr<std::string> prompt = chat::EncodePrompt(*messages, options);
    if (!prompt.ok()) return prompt.status();
    std::cout << *prompt << std::flush;
    return absl::OkStatus();
  }
  auto tok = tokenizer::Tokenizer::FromFile(o.tokenizer);
  if (!tok.ok()) return tok.status();
  absl::StatusOr<std::vector<int32_t>> ids = chat::EncodeIds(*messages, options, **tok);
  if (!ids.ok()) return ids.status();
  std::cout << nlohmann::json(*ids).dump() << "\n";
  return absl::OkStatus();
}

int RunParse(const ChatOptions& o) {
  absl::StatusOr<std::string> text = ReadFile(o.completion);
  if (!text.ok()) {
    std::cerr << "chat parse: " << text.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<chat::ParsedMessage> parsed = chat::ParseCompletion(*text, Mode(o.thinking_mode));
  if (!parsed.ok()) {
    std::cerr << "parse error: " << parsed.status().message() << "\n";
    return kExitParseError;
  }
  std::cout << chat::ParsedMessageToJson(*parsed).dump(-1, ' ', false,
                                                       chat::OrderedJson::error_handler_t::replace)
            << "\n";
  return kExitOk;
}

void SetupChat(CLI::App& app, Context& context) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Encode and parse the DeepSeek-V4 chat format");
  cmd->require_subcommand(1);
  const auto modes = CLI::IsMember({"thinking", "chat"});
  CLI::App* encode = cmd->add_subcommand("encode", "Print the prompt of a JSON message list");
  encode->add_option("--messages", o->messages, "JSON array of messages")->required();
  encode->add_option("--thinking-mode", o->thinking_mode, "thinking (default) or chat")
      ->check(modes);
  encode->add_option(
      "--reasoning-effort", o->effort,
      "1..100, max (100), high (75), low (50), none, or the V4 literal modes v4-max, v4-high");
  encode->add_flag("--no-drop-thinking", o->no_drop_thinking, "Keep earlier reasoning");
  encode->add_flag("--no-bos", o->no_bos, "Leave out the begin-of-sentence token");
  encode->add_option("--tokenizer", o->tokenizer, "Print ids with this tokenizer.json instead");
  encode->callback([o, &context] {
    absl::Status status = PrintEncoding(*o);
    if (!status.ok()) std::cerr << "chat encode: " << status.message() << "\n";
    context.exit_code = status.ok() ? kExitOk : kExitUsage;
  });
  CLI::App* parse = cmd->add_subcommand("parse", "Parse a completion into a message (JSON)");
  parse->add_option("--completion", o->completion, "File with the completion text")->required();
  parse->add_option("--thinking-mode", o->thinking_mode, "thinking or chat")
      ->required()
      ->check(modes);
  parse->callback([o, &context] { context.exit_code = RunParse(*o); });
}

}  // namespace

LOOM_REGISTER_COMMAND("chat", SetupChat);

}  // namespace loom::cli
