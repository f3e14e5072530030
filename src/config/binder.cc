#include "loom/config/binder.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>

namespace loom::config {
namespace {

std::string Describe(const YAML::Node& node) {
  if (node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "'" + node.Scalar() + "'";
}

std::string FormatNumber(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream out;
  out << v;
  return out.str();
}

template <class Int>
bool ParseInt(const std::string& text, Int& out) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, out);
  return ec == std::errc() && ptr == end && begin != end;
}

bool ParseDouble(const std::string& text, double& out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size() && std::isfinite(out);
}

bool ParseBool(const std::string& text, bool& out) {
  if (text == "true" || text == "True" || text == "TRUE") {
    out = true;
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    out = false;
    return true;
  }
  return false;
}

bool ParseString(const std::string& text, std::string& out) {
  out = text;
  return true;
}

}  // namespace

Binder::MaybeNode Binder::Child(const char* key) {
  known_.insert(key);
  if (!node_ || !node_->IsMap()) return std::nullopt;
  const YAML::Node& parent = *node_;
  YAML::Node child = parent[key];  // const lookup: never inserts
  if (!child.IsDefined()) return std::nullopt;
  return child;
}

void Binder::ReportUnknownKeys() {
  if (!node_ || !node_->IsMap()) return;
  for (const auto& item : *node_) {
    const std::string name = item.first.Scalar();
    if (known_.count(name)) continue;
    std::string message = "unknown key";
    std::string best;
    int best_distance = 1 << 30;
    for (const auto& candidate : known_) {
      int d = EditDistance(name, candidate);
      if (d < best_distance) {
        best_distance = d;
        best = candidate;
      }
    }
    int tolerance = std::max<int>(1, static_cast<int>(name.size()) / 3);
    if (!best.empty() && best_distance <= tolerance) {
      message += " (did you mean '" + best + "'?)";
    } else if (!known_.empty()) {
      message += "; expected one of:";
      for (const auto& candidate : known_) message += " " + candidate;
    }
    Report(JoinKey(path_, name), message);
  }
}

void Binder::Report(const std::string& key_path, const std::string& message) {
  errors_.push_back({tree_.LocationOf(key_path), key_path, message});
}

void Binder::Error(const std::string& key, const std::string& message) {
  Report(JoinKey(path_, key), message);
}

void Binder::MissingCheck(const std::string& key_path, const FieldSpec& spec) {
  if (spec.required) Report(key_path, "required key is missing");
}

void Binder::TypeError(const std::string& key_path, const std::string& expected,
                       const YAML::Node& node) {
  Report(key_path, "expected " + expected + ", got " + Describe(node));
}

template <class Number>
void Binder::CheckRange(const std::string& key_path, Number value, const FieldSpec& spec) {
  const double v = static_cast<double>(value);
  if ((spec.min && v < *spec.min) || (spec.max && v > *spec.max)) {
    std::string range;
    if (spec.min && spec.max) {
      range = "between " + FormatNumber(*spec.min) + " and " + FormatNumber(*spec.max);
    } else if (spec.min) {
      range = ">= " + FormatNumber(*spec.min);
    } else {
      range = "<= " + FormatNumber(*spec.max);
    }
    std::ostringstream got;
    got << value;
    Report(key_path, "out of range: expected a value " + range + ", got " + got.str());
  }
}

template <class T, class Parse>
void Binder::Scalar(const char* key, T& value, const FieldSpec& spec, const char* expected,
                    Parse parse) {
  MaybeNode node = Child(key);
  const std::string key_path = JoinKey(path_, key);
  if (!node) return MissingCheck(key_path, spec);
  if (!node->IsScalar() || !parse(node->Scalar(), value))
    return TypeError(key_path, expected, *node);
  if constexpr (std::is_arithmetic_v<T>) {
    CheckRange(key_path, value, spec);
  } else {
    if (spec.required && value.empty()) Report(key_path, "required key is empty");
    if (!spec.choices.empty() &&
        std::find(spec.choices.begin(), spec.choices.end(), value) == spec.choices.end()) {
      std::string message = "expected one of";
      for (const auto& choice : spec.choices) message += " '" + choice + "'";
      Report(key_path, message + ", got '" + value + "'");
    }
  }
}

template <class T, class Parse>
void Binder::ScalarList(const char* key, std::vector<T>& value, const FieldSpec& spec,
                        const char* expected, Parse parse) {
  MaybeNode node = Child(key);
  const std::string key_path = JoinKey(path_, key);
  if (!node) return MissingCheck(key_path, spec);
  if (!node->IsSequence()) return TypeError(key_path, std::string("a list of ") + expected, *node);
  value.assign(node->size(), T{});
  for (size_t i = 0; i < node->size(); ++i) {
    const std::string item_path = key_path + "[" + std::to_string(i) + "]";
    const YAML::Node item = (*node)[i];
    if (!item.IsScalar() || !parse(item.Scalar(), value[i])) {
      TypeError(item_path, expected, item);
      continue;
    }
    if constexpr (std::is_arithmetic_v<T>) CheckRange(item_path, value[i], spec);
  }
}

void Binder::Field(const char* key, bool& value, const FieldSpec& spec) {
  Scalar(key, value, spec, "true or false", ParseBool);
}
namespace {

// An integer, or one of `spec.names`.
std::function<bool(const std::string&, int&)> IntOrName(const FieldSpec& spec) {
  return [&spec](const std::string& text, int& out) {
    if (ParseInt<int>(text, out)) return true;
    for (const auto& [name, number] : spec.names) {
      if (text == name) {
        out = number;
        return true;
      }
    }
    return false;
  };
}

// "an integer" / "integers", with the names a field accepts.
std::string IntExpected(const FieldSpec& spec, const std::string& what) {
  if (spec.names.empty()) return what;
  std::string names;
  for (const auto& [name, number] : spec.names) names += (names.empty() ? "" : ", ") + name;
  return what + " (or " + names + ")";
}

}  // namespace

void Binder::Field(const char* key, int& value, const FieldSpec& spec) {
  Scalar(key, value, spec, IntExpected(spec, "an integer").c_str(), IntOrName(spec));
}
void Binder::Field(const char* key, int64_t& value, const FieldSpec& spec) {
  Scalar(key, value, spec, "an integer", ParseInt<int64_t>);
}
void Binder::Field(const char* key, double& value, const FieldSpec& spec) {
  Scalar(key, value, spec, "a number", ParseDouble);
}
void Binder::Field(const char* key, std::string& value, const FieldSpec& spec) {
  Scalar(key, value, spec, "a string", ParseString);
}
void Binder::Field(const char* key, std::vector<int>& value, const FieldSpec& spec) {
  ScalarList(key, value, spec, IntExpected(spec, "integers").c_str(), IntOrName(spec));
}
void Binder::Field(const char* key, std::vector<double>& value, const FieldSpec& spec) {
  ScalarList(key, value, spec, "numbers", ParseDouble);
}
void Binder::Field(const char* key, std::vector<std::string>& value, const FieldSpec& spec) {
  ScalarList(key, value, spec, "strings", ParseString);
}
void Binder::Field(const char* key, std::map<std::string, std::string>& value,
                   const FieldSpec& spec) {
  MaybeNode node = Child(key);
  const std::string key_path = JoinKey(path_, key);
  if (!node) return MissingCheck(key_path, spec);
  if (!node->IsMap()) return TypeError(key_path, "a map of scalars", *node);
  value.clear();
  for (const auto& item : *node) {
    const std::string name = item.first.Scalar();
    if (!item.second.IsScalar()) {
      TypeError(JoinKey(key_path, name), "a scalar", item.second);
      continue;
    }
    value[name] = item.second.Scalar();
  }
}

}  // namespace loom::config
