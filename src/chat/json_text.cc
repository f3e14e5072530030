#include "chat/json_text.h"

namespace loom::chat {
namespace {

void Append(const OrderedJson& value, std::string* out) {
  if (value.is_object()) {
    *out += '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) *out += ", ";
      first = false;
      *out += OrderedJson(it.key()).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
      *out += ": ";
      Append(it.value(), out);
    }
    *out += '}';
  } else if (value.is_array()) {
    *out += '[';
    for (size_t i = 0; i < value.size(); ++i) {
      if (i > 0) *out += ", ";
      Append(value[i], out);
    }
    *out += ']';
  } else {
    *out += value.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  }
}

}  // namespace

std::string PromptJson(const OrderedJson& value) {
  std::string out;
  Append(value, &out);
  return out;
}

}  // namespace loom::chat
