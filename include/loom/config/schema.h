#pragma once
// The vocabulary config structs use to describe their fields.
//
// A config struct is a plain struct with defaults in its member initialisers
// and one member template that lists its fields for any visitor:
//
//   struct RolloutConfig {
//     int max_batch = 64;
//     template <class V> void Visit(V& v) {
//       v.Field("max_batch", max_batch, Doc("Samples decoded per step.").Unit("samples").Min(1));
//     }
//   };
//
// Visitors (the YAML binder, the YAML dumper, the docs generator) walk the
// same list, so parsing, the resolved dump and docs/config.md cannot disagree.
// Supported field types: bool, int, int64_t, double, std::string,
// std::vector<int|double|std::string>, std::map<std::string, std::string>;
// nested structs via v.Section(key, member, doc) and lists of structs via
// v.List(key, member, doc).

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace loom::config {

// What a field means and which values it accepts. Built fluently:
// Doc("...").Unit("tokens").Min(1).Max(100).
struct FieldSpec {
  std::string doc;
  std::string unit;
  std::optional<double> min;
  std::optional<double> max;
  std::vector<std::string> choices;  // for strings: the only accepted values
  bool required = false;             // must be given (no default)
  // For integers: names accepted in place of values (effort tiers: max = 100).
  std::vector<std::pair<std::string, int>> names;

  FieldSpec& Unit(std::string u) {
    unit = std::move(u);
    return *this;
  }
  FieldSpec& Min(double v) {
    min = v;
    return *this;
  }
  FieldSpec& Max(double v) {
    max = v;
    return *this;
  }
  FieldSpec& Range(double lo, double hi) {
    min = lo;
    max = hi;
    return *this;
  }
  FieldSpec& OneOf(std::vector<std::string> values) {
    choices = std::move(values);
    return *this;
  }
  FieldSpec& Required() {
    required = true;
    return *this;
  }
  FieldSpec& Named(std::vector<std::pair<std::string, int>> n) {
    names = std::move(n);
    return *this;
  }
};

inline FieldSpec Doc(std::string text) {
  FieldSpec spec;
  spec.doc = std::move(text);
  return spec;
}

// An error found while validating a struct's cross-field rules (its
// `Validate(ErrorSink&)` member, when it has one). `key` is relative to the struct.
class ErrorSink {
 public:
  virtual ~ErrorSink() = default;
  virtual void Error(const std::string& key, const std::string& message) = 0;
};

}  // namespace loom::config
