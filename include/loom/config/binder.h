#pragma once
// Binder: fills a config struct from a ConfigTree, collecting every error
// (wrong type, out of range, unknown key with a suggestion, missing required
// key, failed cross-field rule) instead of stopping at the first.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/config/schema.h"
#include "loom/config/tree.h"

namespace loom::config {

namespace internal {
template <class T, class = void>
struct HasValidate : std::false_type {};
template <class T>
struct HasValidate<T, std::void_t<decltype(std::declval<const T&>().Validate(
                          std::declval<ErrorSink&>()))>> : std::true_type {};
}  // namespace internal

class Binder : public ErrorSink {
 public:
  Binder(const ConfigTree& tree, std::vector<ConfigError>& errors)
      : tree_(tree), errors_(errors) {}

  // Binds the whole tree into `config`.
  template <class T>
  void BindRoot(T& config) {
    BindStruct(tree_.root(), "", config);
  }

  // A key's value, or nothing when the key is absent. (yaml-cpp's own
  // "invalid" nodes cannot be copied around safely, hence the optional.)
  using MaybeNode = std::optional<YAML::Node>;

  template <class T>
  void Section(const char* key, T& section, const FieldSpec& spec) {
    (void)spec;
    BindStruct(Child(key), JoinKey(path_, key), section);
  }

  template <class T>
  void List(const char* key, std::vector<T>& items, const FieldSpec& spec) {
    MaybeNode node = Child(key);
    const std::string key_path = JoinKey(path_, key);
    if (!node) return MissingCheck(key_path, spec);
    if (!node->IsSequence()) return TypeError(key_path, "a list of maps", *node);
    items.assign(node->size(), T{});
    for (size_t i = 0; i < node->size(); ++i) {
      BindStruct((*node)[i], key_path + "[" + std::to_string(i) + "]", items[i]);
    }
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

  // ErrorSink, for Validate(): `key` is relative to the struct being validated.
  void Error(const std::string& key, const std::string& message) override;

 private:
  template <class T>
  void BindStruct(const MaybeNode& node, const std::string& key_path, T& config) {
    if (node && !node->IsNull() && !node->IsMap()) return TypeError(key_path, "a map", *node);
    const size_t errors_before = errors_.size();
    std::string saved_path = path_;
    MaybeNode saved_node = node_;
    std::set<std::string> saved_known = std::move(known_);
    path_ = key_path;
    SetNode(node);
    known_.clear();
    config.Visit(*this);
    ReportUnknownKeys();
    // Cross-field rules run only when the fields themselves were valid.
    if constexpr (internal::HasValidate<T>::value) {
      if (errors_.size() == errors_before) config.Validate(*this);
    }
    path_ = saved_path;
    SetNode(saved_node);
    known_ = std::move(saved_known);
  }

  // Rebinds node_ without yaml-cpp's assignment, which would overwrite the
  // referenced node's contents instead.
  void SetNode(const MaybeNode& node) {
    node_.reset();
    if (node) node_.emplace(*node);
  }

  MaybeNode Child(const char* key);  // marks `key` as known
  void ReportUnknownKeys();
  void MissingCheck(const std::string& key_path, const FieldSpec& spec);
  void TypeError(const std::string& key_path, const std::string& expected, const YAML::Node& node);
  void Report(const std::string& key_path, const std::string& message);
  template <class Number>
  void CheckRange(const std::string& key_path, Number value, const FieldSpec& spec);
  template <class T, class Parse>
  void Scalar(const char* key, T& value, const FieldSpec& spec, const char* expected, Parse parse);
  template <class T, class Parse>
  void ScalarList(const char* key, std::vector<T>& value, const FieldSpec& spec,
                  const char* expected, Parse parse);

  const ConfigTree& tree_;
  std::vector<ConfigError>& errors_;
  std::string path_;
  MaybeNode node_;
  std::set<std::string> known_;
};

// Binds `tree` into a default-constructed T; returns the errors (empty on success).
template <class T>
std::vector<ConfigError> Bind(const ConfigTree& tree, T& config) {
  std::vector<ConfigError> errors;
  Binder binder(tree, errors);
  binder.BindRoot(config);
  return errors;
}

}  // namespace loom::config
