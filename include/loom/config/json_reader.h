#pragma once
// JsonReader: typed fields out of a JSON document that loom did not write in
// this process (checkpoints, model config.json, sample states), with every
// mismatch an error that names the document and the field's path:
//
//   JsonReader read("state.json", absl::StatusCode::kDataLoss);
//   read.Get(j, "step", cursor.step);                  // required
//   read.GetOptional(j, "teacher", entry.teacher);     // absent or null: unchanged
//   read.Get(turn, "cut", cut, "turns[3]");            // names field 'turns[3].cut'
//   if (!read.ok()) return read.status();
//
// It remembers every error (status() carries the first; errors() all of
// them, for readers that report everything at once).

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {

class JsonReader {
 public:
  explicit JsonReader(std::string source,
                      absl::StatusCode code = absl::StatusCode::kInvalidArgument)
      : source_(std::move(source)), code_(code) {}

  // A required field: missing, or of another type, is an error.
  template <class T>
  void Get(const nlohmann::json& object, std::string_view key, T& out, std::string_view path = "") {
    if (!object.is_object() || !object.contains(key)) {
      Fail(Field(key, path), "is missing");
      return;
    }
    Convert(object.at(std::string(key)), Field(key, path), out);
  }

  // An optional field: absent or null leaves `out` as it was.
  template <class T>
  void GetOptional(const nlohmann::json& object, std::string_view key, T& out,
                   std::string_view path = "") {
    if (!object.is_object()) {
      Fail(std::string(path.empty() ? "(document)" : path), "is not an object");
      return;
    }
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return;
    Convert(*it, Field(key, path), out);
  }

  // Records an error about `field` found by the caller's own check.
  void Fail(const std::string& field, const std::string& message) {
    errors_.push_back(absl::StrCat(source_, ": field '", field, "' ", message));
  }
  // Records an error about the document as a whole (several fields together).
  void Error(const std::string& message) {
    errors_.push_back(absl::StrCat(source_, ": ", message));
  }

  bool ok() const { return errors_.empty(); }
  absl::Status status() const {
    return ok() ? absl::OkStatus() : absl::Status(code_, errors_.front());
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  static std::string Field(std::string_view key, std::string_view path) {
    return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
  }

  // nlohmann converts 2.5 to an int and -1 to a uint64_t silently; a
  // reader of untrusted numbers must not.
  template <class T>
  static bool Fits(const nlohmann::json& value) {
    if constexpr (std::is_same_v<T, bool>) {
      return value.is_boolean();
    } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      if (!value.is_number_integer()) return false;
      if (!value.is_number_unsigned() && value.get<int64_t>() < 0) return false;
      return value.get<uint64_t>() <= std::numeric_limits<T>::max();
    } else if constexpr (std::is_integral_v<T>) {
      if (!value.is_number_integer()) return false;
      if (value.is_number_unsigned()) {
        return value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
      }
      return value.get<int64_t>() >= std::numeric_limits<T>::min() &&
             value.get<int64_t>() <= std::numeric_limits<T>::max();
    } else {
      return true;
    }
  }

  template <class T>
  void Convert(const nlohmann::json& value, const std::string& field, T& out) {
    if (!Fits<T>(value)) {
      Fail(field, absl::StrCat("has the wrong type: ", value.dump()));
      return;
    }
    try {
      out = value.get<T>();
    } catch (const nlohmann::json::exception&) {
      Fail(field, absl::StrCat("has the wrong type: ", value.dump()));
    }
  }

  std::string source_;
  absl::StatusCode code_;
  std::vector<std::string> errors_;
};

}  // namespace loom
