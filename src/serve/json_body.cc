#include "loom/serve/json_body.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace loom::serve {

using chat::OrderedJson;

absl::Status FieldError(std::string_view field, std::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(absl::string_view(field.data(), field.size()), ": ",
                   absl::string_view(problem.data(), problem.size())));
}

absl::StatusOr<OrderedJson> ParseJsonBody(std::string_view body) {
  try {
    OrderedJson doc = OrderedJson::parse(body);
    if (!doc.is_object()) return absl::InvalidArgumentError("the body is not a JSON object");
    return doc;
  } catch (const OrderedJson::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the body is not JSON: ", e.what()));
  }
}

absl::Status ReadNumber(const OrderedJson& doc, const char* key, double lo, double hi,
                        double* out) {
  if (!doc.contains(key) || doc[key].is_null()) return absl::OkStatus();
  if (!doc[key].is_number()) return FieldError(key, "must be a number");
  const double v = doc[key].get<double>();
  if (v < lo || v > hi) return FieldError(key, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadBool(const OrderedJson& doc, const char* key, bool* out) {
  if (!doc.contains(key) || doc[key].is_null()) return absl::OkStatus();
  if (!doc[key].is_boolean()) return FieldError(key, "must be a boolean");
  *out = doc[key].get<bool>();
  return absl::OkStatus();
}

absl::Status ReadString(const OrderedJson& doc, const char* key, std::string* out) {
  if (!doc.contains(key) || doc[key].is_null()) return absl::OkStatus();
  if (!doc[key].is_string()) return FieldError(key, "must be a string");
  *out = doc[key].get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadSampling(const OrderedJson& doc, double max_temperature, double* temperature,
                          double* top_p) {
  absl::Status status = ReadNumber(doc, "temperature", 0, max_temperature, temperature);
  if (status.ok()) status = ReadNumber(doc, "top_p", 0, 1, top_p);
  if (status.ok() && *top_p <= 0) status = FieldError("top_p", "must be above 0");
  return status;
}

absl::Status ReadPositiveInt(const OrderedJson& doc, const char* key, int64_t* out) {
  if (!doc.contains(key) || doc[key].is_null()) return absl::OkStatus();
  if (!doc[key].is_number_integer() || doc[key].get<int64_t>() < 1) {
    return FieldError(key, "must be a positive integer");
  }
  *out = doc[key].get<int64_t>();
  return absl::OkStatus();
}

absl::StatusOr<std::string> TextParts(const OrderedJson& value, const std::string& field,
                                      std::initializer_list<std::string_view> types,
                                      const std::function<bool(const std::string&)>& keep) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) return FieldError(field, "must be a string or an array of parts");
  std::string text;
  for (size_t j = 0; j < value.size(); ++j) {
    const std::string part = Indexed(field, j);
    auto type = TypeOf(value[j], part);
    if (!type.ok()) return type.status();
    if (std::find(types.begin(), types.end(), *type) == types.end()) {
      return FieldError(part + ".type", absl::StrCat("\"", *type, "\" is not supported"));
    }
    auto piece = RequiredString(value[j], "text", part);
    if (!piece.ok()) return piece.status();
    if (keep && !keep(*piece)) continue;
    if (!text.empty()) text += "\n";
    text += *piece;
  }
  return text;
}

std::string Indexed(std::string_view field, size_t index) {
  return absl::StrCat(absl::string_view(field.data(), field.size()), "[", index, "]");
}

absl::StatusOr<std::string> RequiredString(const OrderedJson& object, const char* key,
                                           const std::string& field) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_string()) {
    return FieldError(absl::StrCat(field, ".", key), "must be a string");
  }
  return object[key].get<std::string>();
}

absl::StatusOr<std::string> TypeOf(const OrderedJson& item, const std::string& field) {
  return RequiredString(item, "type", field);
}

void ConvertedMessages::Add(OrderedJson message, std::string field) {
  messages_.push_back(std::move(message));
  origin_.push_back(std::move(field));
}

void ConvertedMessages::SetTools(OrderedJson tools) {
  if (!messages_.empty() && !tools.empty()) messages_[0]["tools"] = std::move(tools);
}

absl::StatusOr<std::vector<chat::Message>> ConvertedMessages::Parse() const {
  auto parsed = chat::MessagesFromJson(messages_);
  if (parsed.ok()) return parsed;
  const std::string message(parsed.status().message());
  const std::string prefix = "messages[";
  const size_t close = message.find(']');
  size_t index = 0;
  if (!absl::StartsWith(message, prefix) || close == std::string::npos ||
      !absl::SimpleAtoi(message.substr(prefix.size(), close - prefix.size()), &index) ||
      index >= origin_.size()) {
    return parsed.status();
  }
  return absl::InvalidArgumentError(absl::StrCat(origin_[index], message.substr(close + 1)));
}

std::string DumpJson(const OrderedJson& value) {
  return value.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

}  // namespace loom::serve
