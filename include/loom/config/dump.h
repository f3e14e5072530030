#pragma once
// Visitors that write a config struct out: as YAML (the fully resolved
// config, every default filled in) and as Markdown reference tables
// (docs/config.md is generated from the same declarations it documents).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "loom/config/schema.h"

namespace loom::config {

// Shortest decimal text that reads back as exactly `value`.
std::string FormatDouble(double value);

class YamlDumper {
 public:
  explicit YamlDumper(YAML::Emitter& out) : out_(out) {}

  template <class T>
  void Section(const char* key, T& section, const FieldSpec&) {
    out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
    section.Visit(*this);
    out_ << YAML::EndMap;
  }
  template <class T>
  void List(const char* key, std::vector<T>& items, const FieldSpec&) {
    out_ << YAML::Key << key << YAML::Value << YAML::BeginSeq;
    for (auto& item : items) {
      out_ << YAML::BeginMap;
      item.Visit(*this);
      out_ << YAML::EndMap;
    }
    out_ << YAML::EndSeq;
  }
  void Field(const char* key, bool& value, const FieldSpec&);
  void Field(const char* key, int& value, const FieldSpec&);
  void Field(const char* key, int64_t& value, const FieldSpec&);
  void Field(const char* key, double& value, const FieldSpec&);
  void Field(const char* key, std::string& value, const FieldSpec&);
  void Field(const char* key, std::vector<int>& value, const FieldSpec&);
  void Field(const char* key, std::vector<double>& value, const FieldSpec&);
  void Field(const char* key, std::vector<std::string>& value, const FieldSpec&);
  void Field(const char* key, std::map<std::string, std::string>& value, const FieldSpec&);

 private:
  YAML::Emitter& out_;
};

// Resolved YAML of a whole config.
template <class T>
std::string DumpYaml(T config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  YamlDumper dumper(out);
  config.Visit(dumper);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

// One row per key: "| `a.b` | type | default | doc |", grouped by section.
class MarkdownDescriber {
 public:
  template <class T>
  void Section(const char* key, T& section, const FieldSpec& spec) {
    std::string saved = prefix_;
    prefix_ = Join(key);
    sections_.push_back("\n## `" + prefix_ + "`\n\n" + spec.doc + "\n\n" + kHeader);
    section.Visit(*this);
    prefix_ = saved;
  }
  template <class T>
  void List(const char* key, std::vector<T>& items, const FieldSpec& spec) {
    (void)items;
    AddRow(key, "list of maps", "[]", spec);
    std::string saved = prefix_;
    prefix_ = Join(key) + "[]";
    T item{};
    item.Visit(*this);
    prefix_ = saved;
  }
  void Field(const char* key, bool& value, const FieldSpec& spec);
  void Field(const char* key, int& value, const FieldSpec& spec);
  void Field(const char* key, int64_t& value, const FieldSpec& spec);
  void Field(const char* key, double& value, const FieldSpec& spec);
  void Field(const char* key, std::string& value, const FieldSpec& spec);
  void Field(const char* key, std::vector<int>& value, const FieldSpec& spec);
  void Field(const char* key, std::vector<double>& value, const FieldSpec& spec);
  void Field(const char* key, std::vector<std::string>& value, const FieldSpec& spec);
  void Field(const char* key, std::map<std::string, std::string>& value, const FieldSpec& spec);

  std::string Markdown() const;

 private:
  static constexpr const char* kHeader =
      "| key | type | default | meaning |\n|---|---|---|---|\n";
  std::string Join(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }
  void AddRow(const std::string& key, const std::string& type, const std::string& default_text,
              const FieldSpec& spec);

  std::string prefix_;
  std::vector<std::string> sections_;
};

template <class T>
std::string DescribeMarkdown(T config) {
  MarkdownDescriber describer;
  config.Visit(describer);
  return describer.Markdown();
}

}  // namespace loom::config
