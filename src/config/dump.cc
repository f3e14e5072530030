#include "loom/config/dump.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace loom::config {

std::string FormatDouble(double value) {
  char buffer[64];
  // Whole numbers as written: 900 -> "900.0", not the shorter "9e+02".
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(buffer, sizeof buffer, "%.1f", value);
    return buffer;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string text = buffer;
  // Keep it a float in YAML's eyes: "1" -> "1.0".
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

namespace {

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

template <class T>
std::string ListText(const std::vector<T>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    if constexpr (std::is_same_v<T, std::string>) {
      out += Quote(values[i]);
    } else if constexpr (std::is_same_v<T, double>) {
      out += FormatDouble(values[i]);
    } else {
      out += std::to_string(values[i]);
    }
  }
  return out + "]";
}

}  // namespace

void YamlDumper::Field(const char* key, bool& value, const FieldSpec&) {
  out_ << YAML::Key << key << YAML::Value << (value ? "true" : "false");
}
void YamlDumper::Field(const char* key, int& value, const FieldSpec&) {
  out_ << YAML::Key << key << YAML::Value << value;
}
void YamlDumper::Field(const char* key, int64_t& value, const FieldSpec&) {
  out_ << YAML::Key << key << YAML::Value << value;
}
void YamlDumper::Field(const char* key, double& value, const FieldSpec&) {
  out_ << YAML::Key << key << YAML::Value << FormatDouble(value);
}
void YamlDumper::Field(const char* key, std::string& value, const FieldSpec&) {
  out_ << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
}
void YamlDumper::Field(const char* key, std::vector<int>& value, const FieldSpec&) {
  out_ << YAML::Key << key << YAML::Value << YAML::Flow << value;
}
void YamlDumper::Field(const char* key, std::vector<double>& value, const FieldSpec&) {
  out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (double v : value) out_ << FormatDouble(v);
  out_ << YAML::EndSeq;
}
void YamlDumper::Field(const char* key, std::vector<std::string>& value, const FieldSpec&) {
  out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const auto& v : value) out_ << YAML::DoubleQuoted << v;
  out_ << YAML::EndSeq;
}
void YamlDumper::Field(const char* key, std::map<std::string, std::string>& value,
                       const FieldSpec&) {
  out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : value) out_ << YAML::Key << k << YAML::Value << v;
  out_ << YAML::EndMap;
}

void MarkdownDescriber::AddRow(const std::string& key, const std::string& type,
                               const std::string& default_text, const FieldSpec& spec) {
  if (sections_.empty()) sections_.push_back(std::string("\n## top level\n\n") + kHeader);
  std::string meaning = spec.doc;
  if (!spec.unit.empty()) meaning += " Unit: " + spec.unit + ".";
  if (spec.min && spec.max) {
    meaning += " Range: " + FormatDouble(*spec.min) + " to " + FormatDouble(*spec.max) + ".";
  } else if (spec.min) {
    meaning += " Minimum: " + FormatDouble(*spec.min) + ".";
  } else if (spec.max) {
    meaning += " Maximum: " + FormatDouble(*spec.max) + ".";
  }
  if (!spec.choices.empty()) {
    meaning += " One of:";
    for (const auto& c : spec.choices) meaning += " `" + c + "`";
    meaning += ".";
  }
  if (!spec.names.empty()) {
    meaning += " Names:";
    for (const auto& [name, number] : spec.names) {
      meaning += " `" + name + "` = " + std::to_string(number) +
                 (&name == &spec.names.back().first ? "." : ",");
    }
  }
  std::string shown_default = spec.required ? "required" : "`" + default_text + "`";
  sections_.back() +=
      "| `" + Join(key) + "` | " + type + " | " + shown_default + " | " + meaning + " |\n";
}

void MarkdownDescriber::Field(const char* key, bool& value, const FieldSpec& spec) {
  AddRow(key, "bool", value ? "true" : "false", spec);
}
void MarkdownDescriber::Field(const char* key, int& value, const FieldSpec& spec) {
  AddRow(key, "int", std::to_string(value), spec);
}
void MarkdownDescriber::Field(const char* key, int64_t& value, const FieldSpec& spec) {
  AddRow(key, "int64", std::to_string(value), spec);
}
void MarkdownDescriber::Field(const char* key, double& value, const FieldSpec& spec) {
  AddRow(key, "float", FormatDouble(value), spec);
}
void MarkdownDescriber::Field(const char* key, std::string& value, const FieldSpec& spec) {
  AddRow(key, "string", Quote(value), spec);
}
void MarkdownDescriber::Field(const char* key, std::vector<int>& value, const FieldSpec& spec) {
  AddRow(key, "list of int", ListText(value), spec);
}
void MarkdownDescriber::Field(const char* key, std::vector<double>& value, const FieldSpec& spec) {
  AddRow(key, "list of float", ListText(value), spec);
}
void MarkdownDescriber::Field(const char* key, std::vector<std::string>& value,
                              const FieldSpec& spec) {
  AddRow(key, "list of string", ListText(value), spec);
}
void MarkdownDescriber::Field(const char* key, std::map<std::string, std::string>& value,
                              const FieldSpec& spec) {
  std::string text = "{";
  for (const auto& [k, v] : value) text += (text.size() > 1 ? ", " : "") + k + ": " + v;
  AddRow(key, "map", text + "}", spec);
}

std::string MarkdownDescriber::Markdown() const {
  std::string out;
  for (const auto& section : sections_) out += section;
  return out;
}

}  // namespace loom::config
