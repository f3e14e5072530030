#include "loom/serve/tool_schema.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::serve {
namespace {

using chat::OrderedJson;

bool HasType(const OrderedJson& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    return value.is_number_integer() ||
           (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>());
  }
  return true;  // an unknown type name constrains nothing
}

absl::Status Fail(const std::string& path, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

absl::Status Check(const OrderedJson& value, const OrderedJson& schema, const std::string& path);

absl::Status CheckType(const OrderedJson& value, const OrderedJson& type, const std::string& path) {
  std::vector<std::string> names;
  if (type.is_string()) names.push_back(type);
  if (type.is_array()) {
    for (const OrderedJson& t : type) {
      if (t.is_string()) names.push_back(t);
    }
  }
  if (names.empty()) return absl::OkStatus();
  for (const std::string& name : names) {
    if (HasType(value, name)) return absl::OkStatus();
  }
  return Fail(path, absl::StrCat("must be ", absl::StrJoin(names, " or ")));
}

absl::Status CheckObject(const OrderedJson& value, const OrderedJson& schema,
                         const std::string& path) {
  if (!value.is_object()) return absl::OkStatus();
  const OrderedJson* properties = schema.contains("properties") && schema["properties"].is_object()
                                      ? &schema["properties"]
                                      : nullptr;
  if (schema.contains("required") && schema["required"].is_array()) {
    for (const OrderedJson& name : schema["required"]) {
      if (name.is_string() && !value.contains(name.get<std::string>())) {
        return Fail(absl::StrCat(path, ".", name.get<std::string>()), "is required");
      }
    }
  }
  for (const auto& [key, item] : value.items()) {
    const std::string at = absl::StrCat(path, ".", key);
    if (properties != nullptr && properties->contains(key)) {
      if (absl::Status s = Check(item, (*properties)[key], at); !s.ok()) return s;
    } else if (schema.contains("additionalProperties")) {
      const OrderedJson& extra = schema["additionalProperties"];
      if (extra.is_boolean() && !extra.get<bool>()) return Fail(at, "is not a known argument");
      if (extra.is_object()) {
        if (absl::Status s = Check(item, extra, at); !s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckArray(const OrderedJson& value, const OrderedJson& schema,
                        const std::string& path) {
  if (!value.is_array()) return absl::OkStatus();
  if (schema.contains("minItems") && schema["minItems"].is_number() &&
      static_cast<double>(value.size()) < schema["minItems"].get<double>()) {
    return Fail(path, absl::StrCat("must have at least ", schema["minItems"].dump(), " items"));
  }
  if (schema.contains("maxItems") && schema["maxItems"].is_number() &&
      static_cast<double>(value.size()) > schema["maxItems"].get<double>()) {
    return Fail(path, absl::StrCat("must have at most ", schema["maxItems"].dump(), " items"));
  }
  if (schema.contains("items") && schema["items"].is_object()) {
    for (size_t i = 0; i < value.size(); ++i) {
      if (absl::Status s = Check(value[i], schema["items"], absl::StrCat(path, "[", i, "]"));
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBounds(const OrderedJson& value, const OrderedJson& schema,
                         const std::string& path) {
  auto bound = [&](const char* key) -> std::optional<double> {
    if (schema.contains(key) && schema[key].is_number()) return schema[key].get<double>();
    return std::nullopt;
  };
  if (value.is_number()) {
    const double v = value.get<double>();
    if (auto lo = bound("minimum"); lo && v < *lo) {
      return Fail(path, absl::StrCat("must be at least ", *lo));
    }
    if (auto hi = bound("maximum"); hi && v > *hi) {
      return Fail(path, absl::StrCat("must be at most ", *hi));
    }
  }
  if (value.is_string()) {
    double size = 0;  // characters: bytes that do not continue a UTF-8 sequence
    for (unsigned char c : value.get<std::string>()) size += (c & 0xC0) != 0x80 ? 1 : 0;
    if (auto lo = bound("minLength"); lo && size < *lo) {
      return Fail(path, absl::StrCat("must be at least ", *lo, " characters"));
    }
    if (auto hi = bound("maxLength"); hi && size > *hi) {
      return Fail(path, absl::StrCat("must be at most ", *hi, " characters"));
    }
  }
  return absl::OkStatus();
}

// How many of the schemas under `key` (anyOf, oneOf) the value satisfies.
size_t Matching(const OrderedJson& value, const OrderedJson& schemas, const std::string& path) {
  size_t n = 0;
  for (const OrderedJson& option : schemas) n += Check(value, option, path).ok() ? 1 : 0;
  return n;
}

absl::Status Check(const OrderedJson& value, const OrderedJson& schema, const std::string& path) {
  if (!schema.is_object()) return absl::OkStatus();  // true, {} or a malformed schema: anything
  if (schema.contains("type")) {
    if (absl::Status s = CheckType(value, schema["type"], path); !s.ok()) return s;
  }
  if (schema.contains("enum") && schema["enum"].is_array()) {
    bool found = false;
    for (const OrderedJson& option : schema["enum"]) found = found || option == value;
    if (!found) return Fail(path, absl::StrCat("must be one of ", schema["enum"].dump()));
  }
  if (schema.contains("const") && schema["const"] != value) {
    return Fail(path, absl::StrCat("must be ", schema["const"].dump()));
  }
  if (schema.contains("anyOf") && schema["anyOf"].is_array() &&
      Matching(value, schema["anyOf"], path) == 0) {
    return Fail(path, "matches none of its anyOf schemas");
  }
  if (schema.contains("oneOf") && schema["oneOf"].is_array() &&
      Matching(value, schema["oneOf"], path) != 1) {
    return Fail(path, "must match exactly one of its oneOf schemas");
  }
  if (absl::Status s = CheckBounds(value, schema, path); !s.ok()) return s;
  if (absl::Status s = CheckArray(value, schema, path); !s.ok()) return s;
  return CheckObject(value, schema, path);
}

}  // namespace

absl::Status CheckToolCall(const chat::ToolCall& call, const std::optional<OrderedJson>& tools) {
  const OrderedJson* parameters = nullptr;
  bool found = false;
  if (tools && tools->is_array()) {
    for (const OrderedJson& tool : *tools) {
      const OrderedJson* function =
          tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
      if (function == nullptr || !function->is_object() ||
          function->value("name", "") != call.name) {
        continue;
      }
      found = true;
      if (function->contains("parameters")) parameters = &(*function)["parameters"];
      break;
    }
  }
  if (!found) return Fail(call.name, "no tool of that name was offered");
  OrderedJson arguments;
  try {
    arguments = OrderedJson::parse(call.arguments);
  } catch (const OrderedJson::exception&) {
    return Fail(call.name, "arguments: not JSON");
  }
  if (!arguments.is_object()) return Fail(call.name, "arguments: must be an object");
  if (parameters == nullptr) return absl::OkStatus();
  if (absl::Status s = Check(arguments, *parameters, "arguments"); !s.ok()) {
    return Fail(call.name, std::string(s.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckToolCalls(const std::vector<chat::ToolCall>& calls,
                            const std::optional<OrderedJson>& tools) {
  for (const chat::ToolCall& call : calls) {
    if (absl::Status s = CheckToolCall(call, tools); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace loom::serve
