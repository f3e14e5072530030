// Tokenizer::FromFile / FromJson: turns tokenizer.json into a TokenizerImpl,
// rejecting every feature the encoder does not implement by name.

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "loom/config/files.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/tokenizer/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/string_view_compat.h"
#include "tokenizer/tokenizer_impl.h"

namespace loom::tokenizer {
namespace {

using Json = nlohmann::json;

// Ids index dense tables; real vocabularies stay far below this.
constexpr int64_t kMaxId = 1 << 24;

bool IsEmptyOrNull(const Json& spec, const char* key) {
  auto it = spec.find(key);
  return it == spec.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

absl::Status LoadVocab(const Json& model, Bpe* bpe, int32_t* max_id) {
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    return absl::InvalidArgumentError("model.vocab must be an object of token → id");
  }
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > kMaxId) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.vocab[\"", it.key(), "\"] must be an integer id in 0..16777216"));
    }
    const auto id = it.value().get<int32_t>();
    bpe->AddToken(it.key(), id);
    *max_id = std::max(*max_id, id);
  }
  return absl::OkStatus();
}

absl::Status LoadMerges(const Json& model, Bpe* bpe) {
  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    return absl::InvalidArgumentError("model.merges must be an array");
  }
  int32_t rank = 0;
  for (const Json& merge : *merges) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string text = merge;
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.merges[", rank, "] \"", text, "\" is not two tokens"));
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0];
      right = merge[1];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("model.merges[", rank, "] must be \"a b\" or [\"a\", \"b\"]"));
    }
    absl::Status status = bpe->AddMerge(left, right, rank++);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status LoadModel(const Json& doc, TokenizerImpl* impl, int32_t* max_id) {
  auto model = doc.find("model");
  if (model == doc.end() || !model->is_object()) {
    return absl::InvalidArgumentError("missing object \"model\"");
  }
  const std::string type = model->value("type", std::string("BPE"));
  if (type != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat("model type \"", type, "\" is not supported (only byte-level BPE)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!IsEmptyOrNull(*model, key)) {
      return absl::UnimplementedError(absl::StrCat("model.", key, " is not supported"));
    }
  }
  if (model->value("byte_fallback", false)) {
    return absl::UnimplementedError("model.byte_fallback is not supported");
  }
  auto dropout = model->find("dropout");
  if (dropout != model->end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return absl::UnimplementedError("model.dropout is not supported");
  }
  absl::Status status = LoadVocab(*model, &impl->bpe, max_id);
  if (status.ok()) status = LoadMerges(*model, &impl->bpe);
  if (!status.ok()) return status;
  auto ignore = model->find("ignore_merges");
  impl->bpe.Finish(ignore != model->end() && ignore->is_boolean() && ignore->get<bool>());
  return absl::OkStatus();
}

struct AddedToken {
  std::string content;
  int32_t id;
  bool special, normalized;
};

// `t[key]` as a boolean, `fallback` when absent or null.
absl::StatusOr<bool> OptionalBool(const Json& t, const char* key, bool fallback,
                                  const std::string& where) {
  auto it = t.find(key);
  if (it == t.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", key, " must be true or false"));
  }
  return it->get<bool>();
}

absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const Json& doc) {
  std::vector<AddedToken> added;
  auto list = doc.find("added_tokens");
  if (list == doc.end() || list->is_null()) return added;
  if (!list->is_array()) return absl::InvalidArgumentError("added_tokens must be an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& t = (*list)[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() > kMaxId || !t.contains("content") ||
        !t["content"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": needs an integer \"id\" (0..16777216) and a string \"content\""));
    }
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      auto set = OptionalBool(t, key, false, where);
      if (!set.ok()) return set.status();
      if (*set) return absl::UnimplementedError(absl::StrCat(where, ".", key, " is not supported"));
    }
    const std::string content = t["content"];
    absl::Status utf8 = ValidateUtf8(content);
    if (!utf8.ok() || content.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".content must be non-empty UTF-8"));
    }
    auto special = OptionalBool(t, "special", false, where);
    if (!special.ok()) return special.status();
    auto normalized = OptionalBool(t, "normalized", !*special, where);
    if (!normalized.ok()) return normalized.status();
    added.push_back({content, t["id"].get<int32_t>(), *special, *normalized});
  }
  return added;
}

absl::Status CheckDecoder(const Json& doc) {
  auto decoder = doc.find("decoder");
  const std::string type = decoder != doc.end() && decoder->is_object()
                               ? decoder->value("type", std::string("?"))
                               : std::string("null");
  if (type != "ByteLevel") {
    return absl::UnimplementedError(
        absl::StrCat("decoder type \"", type, "\" is not supported (only ByteLevel)"));
  }
  return absl::OkStatus();
}

// What HF's ByteLevel decoder gives for `token`: its bytes when every
// character is in the byte-level alphabet, else the token text itself.
std::string DecodedBytes(const std::string& token) {
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const int b = CodePointToByte(NextCodePoint(token, &pos));
    if (b < 0) return token;
    bytes += static_cast<char>(b);
  }
  return bytes;
}

void BuildTables(const std::vector<AddedToken>& added, int32_t max_id, TokenizerImpl* impl) {
  const size_t size = static_cast<size_t>(max_id) + 1;
  impl->tokens.assign(size, "");
  impl->present.assign(size, false);
  impl->special.assign(size, false);
  for (const auto& [token, id] : impl->bpe.vocab()) {
    impl->tokens[id] = token;
    impl->present[id] = true;
  }
  for (const AddedToken& t : added) {
    impl->tokens[t.id] = t.content;
    impl->present[t.id] = true;
    impl->special[t.id] = t.special;
    impl->added_ids.try_emplace(t.content, t.id);
    if (t.normalized) {
      impl->normalized_added.Add(impl->normalizer.Apply(t.content), t.id);
    } else {
      impl->raw_added.Add(t.content, t.id);
    }
  }
  impl->decoded.resize(size);
  for (size_t id = 0; id < size; ++id) impl->decoded[id] = DecodedBytes(impl->tokens[id]);
}

absl::Status Build(const Json& doc, TokenizerImpl* impl) {
  if (!doc.is_object()) return absl::InvalidArgumentError("top level must be a JSON object");
  auto normalizer = Normalizer::FromJson(doc.value("normalizer", Json()));
  if (!normalizer.ok()) return normalizer.status();
  impl->normalizer = *normalizer;
  auto pre = PreTokenizer::FromJson(doc.value("pre_tokenizer", Json()));
  if (!pre.ok()) return pre.status();
  impl->pre_tokenizer = std::move(*pre);
  absl::Status status = CheckDecoder(doc);
  if (!status.ok()) return status;
  int32_t max_id = -1;
  status = LoadModel(doc, impl, &max_id);
  if (!status.ok()) return status;
  auto added = ParseAddedTokens(doc);
  if (!added.ok()) return added.status();
  for (const AddedToken& t : *added) max_id = std::max(max_id, t.id);
  BuildTables(*added, max_id, impl);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text,
                                                               std::string_view origin) {
  Json doc = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(origin), ": not valid JSON"));
  }
  auto impl = std::make_unique<TokenizerImpl>();
  absl::Status status;
  try {
    status = Build(doc, impl.get());
  } catch (const Json::exception& e) {
    // A field of an unexpected JSON type that no check above names.
    status = absl::InvalidArgumentError(absl::StrCat("malformed tokenizer.json: ", e.what()));
  }
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(AsAbsl(origin), ": ", status.message()));
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return FromJson(*text, path);
}

}  // namespace loom::tokenizer
