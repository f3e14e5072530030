#include "loom/tokenizer/tiny.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "loom/tokenizer/dsv4_tokens.h"
#include "tokenizer/byte_level.h"

namespace loom::tokenizer {
namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson ByteLevelPart(bool use_regex) {
  return OrderedJson{{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", false},
                     {"use_regex", use_regex}};
}

constexpr std::string_view kEffortPhrases[] = {dsv4::kEffortLineStart, dsv4::kEffortLineEnd};

OrderedJson AddedTokenJson(int id, std::string_view content, bool special) {
  return OrderedJson{{"id", id},
                     {"content", std::string(content)},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}};
}

OrderedJson AddedTokens(const TinyTokenizerOptions& options) {
  OrderedJson added = OrderedJson::array();
  int id = 256;
  for (std::string_view s : dsv4::kAllSpecial) added.push_back(AddedTokenJson(id++, s, true));
  if (options.effort_phrases) {
    for (std::string_view s : kEffortPhrases) added.push_back(AddedTokenJson(id++, s, false));
  }
  return added;
}

OrderedJson Model() {
  OrderedJson vocab = OrderedJson::object();
  for (int b = 0; b < 256; ++b) vocab[ByteToUnicode(static_cast<uint8_t>(b))] = b;
  return OrderedJson{{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"ignore_merges", false},
                     {"vocab", vocab},
                     {"merges", OrderedJson::array()}};
}

}  // namespace

std::string TinyTokenizerJson(const TinyTokenizerOptions& options) {
  OrderedJson doc = {{"version", "1.0"},          {"truncation", nullptr},
                     {"padding", nullptr},        {"added_tokens", AddedTokens(options)},
                     {"normalizer", nullptr},     {"pre_tokenizer", ByteLevelPart(false)},
                     {"post_processor", nullptr}, {"decoder", ByteLevelPart(true)},
                     {"model", Model()}};
  return doc.dump(2) + "\n";
}

int TinyTokenizerVocabSize(const TinyTokenizerOptions& options) {
  return 256 + static_cast<int>(std::size(dsv4::kAllSpecial)) +
         (options.effort_phrases ? static_cast<int>(std::size(kEffortPhrases)) : 0);
}

TinyTokenizerOptions TinyTokenizerNamed(std::string_view name) {
  return {name == kTinyTokenizerNames[1]};
}

absl::StatusOr<std::string> WithChatSpecials(std::string_view tokenizer_json, int64_t* vocab_size) {
  // A std::map-backed document: the ordered one looks keys up linearly, and
  // a real vocabulary has 128k of them. Key order does not matter here.
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(tokenizer_json);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(std::string("tokenizer.json is not JSON: ") + e.what());
  }
  if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object() ||
      !doc["model"].contains("vocab") || !doc["model"]["vocab"].is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: model.vocab must be an object");
  }
  if (!doc.contains("added_tokens") || doc["added_tokens"].is_null()) {
    doc["added_tokens"] = nlohmann::json::array();
  }
  if (!doc["added_tokens"].is_array()) {
    return absl::InvalidArgumentError("tokenizer.json: added_tokens must be an array");
  }
  int64_t next = 0;
  for (const auto& [token, id] : doc["model"]["vocab"].items()) {
    if (!id.is_number_integer()) {
      return absl::InvalidArgumentError("tokenizer.json: model.vocab[\"" + token +
                                        "\"] must be an integer id");
    }
    next = std::max(next, id.get<int64_t>() + 1);
  }
  std::set<std::string> present;
  for (const nlohmann::json& added : doc["added_tokens"]) {
    if (!added.is_object() || !added.contains("id") || !added["id"].is_number_integer() ||
        !added.contains("content") || !added["content"].is_string()) {
      return absl::InvalidArgumentError(
          "tokenizer.json: every added_tokens entry needs an integer id and a string content");
    }
    next = std::max(next, added["id"].get<int64_t>() + 1);
    present.insert(added["content"].get<std::string>());
  }
  for (std::string_view special : dsv4::kAllSpecial) {
    if (present.count(std::string(special)) != 0) continue;
    doc["added_tokens"].push_back(
        nlohmann::json::parse(AddedTokenJson(static_cast<int>(next++), special, true).dump()));
  }
  *vocab_size = next;
  return doc.dump();
}

}  // namespace loom::tokenizer
