#pragma once
// The reading and writing that every wire dialect's JSON shares: a request
// body as an object, fields checked by type and range with errors that name
// them, a conversation converted to the chat format's messages that still
// names the request's own fields in errors, and a response written with
// invalid UTF-8 replaced rather than thrown on. Thread-safe.

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/chat/message.h"

namespace loom::serve {

// INVALID_ARGUMENT "<field>: <problem>", the shape every dialect's error names.
absl::Status FieldError(std::string_view field, std::string_view problem);

// The body as a JSON object; INVALID_ARGUMENT when it is not JSON or not an object.
absl::StatusOr<chat::OrderedJson> ParseJsonBody(std::string_view body);

// Optional fields of `doc`: absent or null keeps `*out`; a wrong type or a
// value out of range is an error naming `key`.
absl::Status ReadNumber(const chat::OrderedJson& doc, const char* key, double lo, double hi,
                        double* out);
absl::Status ReadBool(const chat::OrderedJson& doc, const char* key, bool* out);
absl::Status ReadString(const chat::OrderedJson& doc, const char* key, std::string* out);
// "temperature" in [0, max_temperature] and "top_p" in (0, 1], as every
// dialect samples (each has its own temperature range).
absl::Status ReadSampling(const chat::OrderedJson& doc, double max_temperature, double* temperature,
                          double* top_p);
// An integer >= 1.
absl::Status ReadPositiveInt(const chat::OrderedJson& doc, const char* key, int64_t* out);

// `value` as text: a string as it is, or an array of parts joined by
// newlines, each an object whose "type" is one of `types` and whose "text"
// is a string. `keep`, when given, drops the parts it returns false for.
absl::StatusOr<std::string> TextParts(
    const chat::OrderedJson& value, const std::string& field,
    std::initializer_list<std::string_view> types,
    const std::function<bool(const std::string&)>& keep = nullptr);

// "field[index]".
std::string Indexed(std::string_view field, size_t index);
// `object[key]` as a string, or an error naming "<field>.<key>".
absl::StatusOr<std::string> RequiredString(const chat::OrderedJson& object, const char* key,
                                           const std::string& field);
// The "type" of a block or item, which must be a string.
absl::StatusOr<std::string> TypeOf(const chat::OrderedJson& item, const std::string& field);

// A dialect's conversation as OpenAI-style messages (chat::MessagesFromJson's
// input), each remembering the request field it came from.
class ConvertedMessages {
 public:
  void Add(chat::OrderedJson message, std::string field);
  chat::OrderedJson& back() { return messages_.back(); }
  bool empty() const { return messages_.empty(); }
  // The tools go on the first message, where the chat format reads them.
  void SetTools(chat::OrderedJson tools);
  // Validated messages; an error names the request's field (an error of
  // MessagesFromJson names the converted message, "messages[4].tool_call_id").
  absl::StatusOr<std::vector<chat::Message>> Parse() const;

 private:
  chat::OrderedJson messages_ = chat::OrderedJson::array();
  std::vector<std::string> origin_;
};

// Compact JSON text; invalid UTF-8 (a model's half character) becomes U+FFFD.
std::string DumpJson(const chat::OrderedJson& value);

}  // namespace loom::serve
