// Same ids as Hugging Face tokenizers on the real DeepSeek-V3 and Qwen3
// vocabularies, for every string of data/corpus.jsonl.
//
// FIXTURE test: the reference ids and decoded strings in
// data/reference_{deepseek_v3,qwen3}.jsonl were produced by the Rust library
// (through @anush008/tokenizers under node) with
//   node tests/tokenizer/hf_reference.js encode <tokenizer.json> tests/tokenizer/data/corpus.jsonl
// (tests/tokenizer/make_corpus.py writes the corpus). tiny_test.cc runs node live.

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/tokenizer/tokenizer.h"
#include "tokenizer/test_paths.h"

namespace loom::tokenizer {
namespace {

using testing::DataPath;

struct Reference {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
};

std::vector<Reference> ReadReference(const std::string& path) {
  std::vector<Reference> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    out.push_back({j["text"], j["ids"].get<std::vector<int32_t>>(), j["decoded"]});
  }
  return out;
}

std::vector<std::string> ReadCorpus() {
  std::vector<std::string> out;
  std::ifstream in(DataPath("corpus.jsonl"));
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

class HfParityTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string name = GetParam();
    const std::string path =
        name == "deepseek_v3" ? testing::DeepSeekV3Json() : testing::Qwen3Json();
    if (!testing::Exists(path)) GTEST_SKIP() << path << " missing: run scripts/setup.sh";
    auto loaded = Tokenizer::FromFile(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    tokenizer_ = std::move(*loaded);
    reference_ = ReadReference(DataPath("reference_" + name + ".jsonl"));
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<Reference> reference_;
};

TEST_P(HfParityTest, FixtureCoversTheWholeCorpus) {
  const std::vector<std::string> corpus = ReadCorpus();
  ASSERT_GE(corpus.size(), 200u);
  ASSERT_EQ(reference_.size(), corpus.size()) << "regenerate the fixture (see file comment)";
  for (size_t i = 0; i < corpus.size(); ++i) EXPECT_EQ(reference_[i].text, corpus[i]);
}

TEST_P(HfParityTest, EncodeGivesHuggingFaceIds) {
  int mismatches = 0;
  for (const Reference& r : reference_) {
    auto ids = tokenizer_->Encode(r.text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    if (*ids != r.ids) {
      ++mismatches;
      ADD_FAILURE() << "ids differ for " << nlohmann::json(r.text).dump();
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(HfParityTest, DecodeGivesHuggingFaceText) {
  for (const Reference& r : reference_) {
    auto text = tokenizer_->Decode(r.ids);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, r.decoded) << nlohmann::json(r.text).dump();
  }
}

INSTANTIATE_TEST_SUITE_P(RealVocabularies, HfParityTest, ::testing::Values("deepseek_v3", "qwen3"));

}  // namespace
}  // namespace loom::tokenizer
