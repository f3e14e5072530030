#include "loom/chat/parser.h"

#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "loom/tokenizer/dsv4_tokens.h"

namespace loom::chat {
namespace {

namespace t = tokenizer::dsv4;
using absl::StrCat;

const std::string kDsml(t::kDsml);
const std::string kToolCallsStart = "\n\n<" + kDsml + "tool_calls";
const std::string kToolCallsEnd = "</" + kDsml + "tool_calls>";
const std::string kInvoke = "<" + kDsml + "invoke";
const std::string kInvokeEnd = "</" + kDsml + "invoke";
const std::string kParameter = "<" + kDsml + "parameter";
const std::string kParameterEnd = "/" + kDsml + "parameter";

absl::Status Error(std::string_view reason) {
  return absl::InvalidArgumentError(std::string(reason));
}

// Shows at most 60 bytes of `s` in an error message, cut between UTF-8
// characters (the message travels in protobuf strings, which must be UTF-8).
std::string Quote(std::string_view s) {
  if (s.size() <= 60) return StrCat("'", std::string(s), "'");
  size_t cut = 60;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return StrCat("'", std::string(s.substr(0, cut)), "...'");
}

struct Read {
  size_t next;               // index after the stop string (or the end)
  std::string_view content;  // text before the stop string
  int stop;                  // index of the stop string found first, -1 for none
};

// Reads from `pos` to the earliest of `stops` (the first listed wins a tie).
Read ReadUntil(std::string_view text, size_t pos, std::initializer_list<std::string_view> stops) {
  size_t best = std::string_view::npos;
  int which = -1, index = 0;
  size_t stop_size = 0;
  for (std::string_view stop : stops) {
    const size_t found = text.find(stop, pos);
    if (found != std::string_view::npos && (best == std::string_view::npos || found < best)) {
      best = found;
      which = index;
      stop_size = stop.size();
    }
    ++index;
  }
  if (which < 0) return {text.size(), text.substr(pos), -1};
  return {best + stop_size, text.substr(pos, best - pos), which};
}

std::string JsonString(std::string_view s) {
  return OrderedJson(std::string(s)).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

absl::StatusOr<std::string> InvokeName(std::string_view head) {
  size_t i = 0;
  while (i < head.size() && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' ||
                             head[i] == '\r' || head[i] == '\f' || head[i] == '\v')) {
    ++i;
  }
  head.remove_prefix(i);
  constexpr std::string_view kOpen = "name=\"", kClose = "\">\n";
  auto ends_with_close = [&](std::string_view s) {
    return s.size() >= kOpen.size() + kClose.size() && s.substr(s.size() - kClose.size()) == kClose;
  };
  // Like the reference's `">\n$`, one more newline may follow (an invoke
  // without parameters has an empty line before its end tag).
  if (!ends_with_close(head) && !head.empty() && head.back() == '\n') head.remove_suffix(1);
  if (!ends_with_close(head) || head.substr(0, kOpen.size()) != kOpen) {
    return Error(StrCat("tool name format error: ", Quote(head)));
  }
  return std::string(head.substr(kOpen.size(), head.size() - kOpen.size() - kClose.size()));
}

struct Parameter {
  std::string name, value;
  bool is_string;
};

// ` name="K" string="true|false">VALUE<` (K is the shortest that fits).
absl::StatusOr<Parameter> ParseParameter(std::string_view p) {
  constexpr std::string_view kOpen = " name=\"", kMid = "\" string=\"";
  if (p.size() >= 2 && p.substr(p.size() - 2) == "<\n") p.remove_suffix(1);  // as `<$` allows
  if (p.substr(0, kOpen.size()) != kOpen || p.empty() || p.back() != '<') {
    return Error(StrCat("parameter format error: ", Quote(p)));
  }
  for (size_t at = p.find(kMid, kOpen.size()); at != std::string_view::npos;
       at = p.find(kMid, at + 1)) {
    const std::string_view rest = p.substr(at + kMid.size());
    for (std::string_view flag : {std::string_view("true\">"), std::string_view("false\">")}) {
      if (rest.substr(0, flag.size()) != flag) continue;
      const std::string_view value = rest.substr(flag.size(), rest.size() - flag.size() - 1);
      return Parameter{std::string(p.substr(kOpen.size(), at - kOpen.size())), std::string(value),
                       flag[0] == 't'};
    }
  }
  return Error(StrCat("parameter format error: ", Quote(p)));
}

// Parses one invoke after its `<｜DSML｜invoke`; `*pos` moves past its end tag.
absl::StatusOr<ToolCall> ParseInvoke(std::string_view text, size_t* pos) {
  Read r = ReadUntil(text, *pos, {kParameter, kInvokeEnd});
  if (r.stop < 0) return Error("tool call not closed: missing </｜DSML｜invoke");
  absl::StatusOr<std::string> name = InvokeName(r.content);
  if (!name.ok()) return name.status();
  std::vector<Parameter> params;
  while (r.stop == 0) {
    r = ReadUntil(text, r.next, {kParameterEnd});
    if (r.stop < 0) return Error("parameter not closed: missing </｜DSML｜parameter>");
    absl::StatusOr<Parameter> param = ParseParameter(r.content);
    if (!param.ok()) return param.status();
    for (const Parameter& seen : params) {
      if (seen.name == param->name) {
        return Error(StrCat("duplicate parameter name ", Quote(param->name)));
      }
    }
    params.push_back(*std::move(param));
    r = ReadUntil(text, r.next, {kParameter, kInvokeEnd});
    if (r.content != ">\n") {
      return Error(StrCat("parameter format error: expected '>\\n' but got ", Quote(r.content)));
    }
  }
  std::string arguments = "{";
  for (size_t i = 0; i < params.size(); ++i) {
    if (i > 0) arguments += ", ";
    arguments += StrCat(JsonString(params[i].name), ": ",
                        params[i].is_string ? JsonString(params[i].value) : params[i].value);
  }
  *pos = r.next;
  return ToolCall{"", *std::move(name), arguments + "}"};
}

// Parses the block after `\n\n<｜DSML｜tool_calls`; `*pos` moves past its end tag.
absl::StatusOr<std::vector<ToolCall>> ParseToolCalls(std::string_view text, size_t* pos) {
  std::vector<ToolCall> calls;
  while (true) {
    Read r = ReadUntil(text, *pos, {kInvoke, kToolCallsEnd});
    if (r.stop < 0) return Error("tool calls block not closed: missing </｜DSML｜tool_calls>");
    if (r.content != ">\n") {
      return Error(StrCat("tool call format error: expected '>\\n' but got ", Quote(r.content)));
    }
    *pos = r.next;
    if (r.stop == 1) return calls;
    absl::StatusOr<ToolCall> call = ParseInvoke(text, pos);
    if (!call.ok()) return call.status();
    calls.push_back(*std::move(call));
  }
}

absl::Status CheckNoSpecial(const ParsedMessage& m) {
  for (std::string_view special : {t::kBos, t::kEos, t::kThinkOpen, t::kThinkClose, t::kDsml}) {
    for (const std::string* field : {&m.content, &m.reasoning_content}) {
      if (field->find(special) != std::string::npos) {
        return Error(StrCat("unexpected special string '", std::string(special), "' in ",
                            field == &m.content ? "content" : "reasoning"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedMessage> ParseCompletion(std::string_view text, ThinkingMode mode) {
  ParsedMessage message;
  size_t pos = 0;
  if (mode == ThinkingMode::kThinking) {
    Read r = ReadUntil(text, 0, {t::kThinkClose, kToolCallsStart});
    if (r.stop != 0) {
      return Error(r.stop < 0 ? "missing </think>: the reasoning never ends"
                              : "tool calls before </think>: the reasoning never ends");
    }
    message.reasoning_content = std::string(r.content);
    pos = r.next;
  }
  Read r = ReadUntil(text, pos, {t::kEos, kToolCallsStart});
  if (r.stop < 0) return Error("missing end of sentence: the completion was cut off");
  message.content = std::string(r.content);
  pos = r.next;
  if (r.stop == 1) {
    absl::StatusOr<std::vector<ToolCall>> calls = ParseToolCalls(text, &pos);
    if (!calls.ok()) return calls.status();
    message.tool_calls = *std::move(calls);
    const std::string_view rest = text.substr(pos);
    if (!rest.empty() && rest != t::kEos) {
      return Error(StrCat("unexpected text after the tool calls: ", Quote(rest)));
    }
  } else if (pos != text.size()) {
    return Error(StrCat("unexpected text after end of sentence: ", Quote(text.substr(pos))));
  }
  absl::Status status = CheckNoSpecial(message);
  if (!status.ok()) return status;
  return message;
}

OrderedJson ParsedMessageToJson(const ParsedMessage& message) {
  OrderedJson calls = OrderedJson::array();
  for (const ToolCall& call : message.tool_calls) {
    calls.push_back(
        {{"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  return {{"role", "assistant"},
          {"content", message.content},
          {"reasoning_content", message.reasoning_content},
          {"tool_calls", calls}};
}

}  // namespace loom::chat
