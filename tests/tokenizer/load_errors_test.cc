// Every malformed or unsupported tokenizer.json is a clear load error that
// names the problem, never a crash.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "loom/tokenizer/tiny.h"
#include "loom/tokenizer/tokenizer.h"
#include "testing/temp_dir.h"

namespace loom::tokenizer {
namespace {

using Json = nlohmann::json;

// The tiny tokenizer with `edit` applied: a valid base to break one thing in.
std::string Edited(void (*edit)(Json&)) {
  Json doc = Json::parse(TinyTokenizerJson());
  edit(doc);
  return doc.dump();
}

void ExpectError(const std::string& text, const std::string& needle) {
  auto tok = Tokenizer::FromJson(text, "test.json");
  ASSERT_FALSE(tok.ok()) << "loaded although: " << needle;
  EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status();
  EXPECT_NE(tok.status().message().find("test.json"), std::string::npos) << tok.status();
}

TEST(LoadErrorsTest, BaseLoads) {
  EXPECT_TRUE(Tokenizer::FromJson(Edited([](Json&) {}), "t").ok());
}

TEST(LoadErrorsTest, NotJson) {
  ExpectError("{\"model\": ", "not valid JSON");
  ExpectError("", "not valid JSON");
  ExpectError("[1, 2]", "top level");
}

TEST(LoadErrorsTest, MissingFileNamesThePath) {
  auto tok = Tokenizer::FromFile("/nonexistent/tokenizer.json");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

TEST(LoadErrorsTest, UnsupportedFeaturesAreNamed) {
  ExpectError(Edited([](Json& d) { d["normalizer"] = {{"type", "Lowercase"}}; }), "Lowercase");
  ExpectError(Edited([](Json& d) { d["pre_tokenizer"] = {{"type", "Whitespace"}}; }), "Whitespace");
  ExpectError(Edited([](Json& d) { d["pre_tokenizer"] = {{"type", "Digits"}}; }), "ByteLevel");
  ExpectError(Edited([](Json& d) { d["model"]["type"] = "WordPiece"; }), "WordPiece");
  ExpectError(Edited([](Json& d) { d["model"]["byte_fallback"] = true; }), "byte_fallback");
  ExpectError(Edited([](Json& d) { d["model"]["dropout"] = 0.1; }), "dropout");
  ExpectError(Edited([](Json& d) { d["model"]["continuing_subword_prefix"] = "##"; }),
              "continuing_subword_prefix");
  ExpectError(Edited([](Json& d) { d["decoder"] = {{"type", "WordPiece"}}; }), "decoder");
  ExpectError(Edited([](Json& d) { d["added_tokens"][0]["lstrip"] = true; }), "lstrip");
  ExpectError(Edited([](Json& d) {
                d["pre_tokenizer"] = {
                    {"type", "Split"}, {"pattern", {{"Regex", "\\s"}}}, {"behavior", "Contiguous"}};
              }),
              "Contiguous");
}

TEST(LoadErrorsTest, MalformedFieldsAreNamed) {
  ExpectError(Edited([](Json& d) { d.erase("model"); }), "model");
  ExpectError(Edited([](Json& d) { d["model"]["vocab"] = Json::array(); }), "model.vocab");
  ExpectError(Edited([](Json& d) { d["model"]["vocab"]["x"] = "seven"; }), "model.vocab[\"x\"]");
  ExpectError(Edited([](Json& d) { d["model"]["merges"] = Json::array({"a b c"}); }),
              "model.merges[0]");
  ExpectError(Edited([](Json& d) { d["model"]["merges"] = Json::array({"zz yy"}); }),
              "missing from model.vocab");
  ExpectError(Edited([](Json& d) { d["model"]["merges"] = Json::array({42}); }), "model.merges[0]");
  ExpectError(Edited([](Json& d) { d["added_tokens"][3].erase("id"); }), "added_tokens[3]");
  ExpectError(Edited([](Json& d) { d["added_tokens"] = 5; }), "added_tokens");
  ExpectError(Edited([](Json& d) { d["added_tokens"][0]["id"] = 1LL << 40; }), "added_tokens[0]");
  ExpectError(Edited([](Json& d) { d["model"]["vocab"]["x"] = -1; }), "model.vocab[\"x\"]");
  ExpectError(Edited([](Json& d) {
                d["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}};
              }),
              "does not compile");
  // Fields of the wrong JSON type (fuzz_tokenizer_json: `"special": 0` used
  // to throw out of the loader and abort the process).
  ExpectError(Edited([](Json& d) { d["added_tokens"][1]["special"] = 0; }),
              "added_tokens[1].special must be true or false");
  ExpectError(Edited([](Json& d) { d["added_tokens"][0]["rstrip"] = "no"; }),
              "added_tokens[0].rstrip must be true or false");
  ExpectError(Edited([](Json& d) { d["decoder"] = {{"type", 7}}; }), "malformed tokenizer.json");
  ExpectError(Edited([](Json& d) {
                d["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", 5}}}};
              }),
              "needs a string \"Regex\"");
}

}  // namespace
}  // namespace loom::tokenizer
