// Behaviour of Tokenizer beyond HF parity: round trips, UTF-8 errors,
// added-token handling, lookups and concurrent use (real vocabularies).

#include "loom/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/test_paths.h"

namespace loom::tokenizer {
namespace {

std::vector<std::string> Corpus() {
  std::vector<std::string> out;
  std::ifstream in(testing::DataPath("corpus.jsonl"));
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

class DeepSeekTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::Exists(testing::DeepSeekV3Json())) return;
    auto loaded = Tokenizer::FromFile(testing::DeepSeekV3Json());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    tok_ = loaded->release();
  }
  static void TearDownTestSuite() { delete tok_; }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << "DeepSeek-V3 tokenizer missing: run scripts/setup.sh";
  }
  static Tokenizer* tok_;
};
Tokenizer* DeepSeekTest::tok_ = nullptr;

TEST_F(DeepSeekTest, DecodeOfEncodeIsIdentityOnValidUtf8) {
  // The DeepSeek-V3 tokenizer has no normalizer, so every string comes back.
  for (const std::string& text : Corpus()) {
    auto ids = tok_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    auto back = tok_->Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, text);
  }
}

TEST_F(DeepSeekTest, InvalidUtf8IsAnErrorNamingTheOffset) {
  for (const std::string& bad :
       {std::string("ab\xff"), std::string("\xc3"), std::string("x\xed\xa0\x80"),
        std::string("\xc0\xaf"), std::string("ok \xf4\x90\x80\x80")}) {
    auto ids = tok_->Encode(bad);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("byte offset"), std::string::npos);
  }
}

TEST_F(DeepSeekTest, SpecialTokensInsideTextBecomeTheirIds) {
  const int32_t user = *tok_->AddedTokenId("<｜User｜>");
  auto ids = tok_->Encode("a<｜User｜>b");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(std::count(ids->begin(), ids->end(), user), 1);
  auto ordinary = tok_->EncodeOrdinary("a<｜User｜>b");
  ASSERT_TRUE(ordinary.ok());
  EXPECT_EQ(std::count(ordinary->begin(), ordinary->end(), user), 0);
  EXPECT_EQ(*tok_->Decode(*ordinary), "a<｜User｜>b");
}

TEST_F(DeepSeekTest, LookupsAgreeWithEachOther) {
  const std::optional<int32_t> bos = tok_->TokenToId("<｜begin▁of▁sentence｜>");
  ASSERT_TRUE(bos.has_value());
  EXPECT_EQ(*bos, 0);
  EXPECT_TRUE(tok_->IsSpecial(*bos));
  EXPECT_EQ(tok_->IdToToken(*bos), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(tok_->SpecialTokenId("<｜begin▁of▁sentence｜>"), bos);
  // <｜User｜> is a normal (non-special) added token in this vocabulary.
  EXPECT_FALSE(tok_->SpecialTokenId("<｜User｜>").has_value());
  EXPECT_TRUE(tok_->AddedTokenId("<｜User｜>").has_value());
  EXPECT_FALSE(tok_->TokenToId("no such token").has_value());
  EXPECT_FALSE(tok_->IdToToken(-1).has_value());
  EXPECT_FALSE(tok_->IdToToken(tok_->VocabSize()).has_value());
  EXPECT_EQ(tok_->TokenToId("Hello"), 19923);
}

TEST_F(DeepSeekTest, DecodeCanSkipSpecialTokensAndRejectsUnknownIds) {
  auto ids = tok_->Encode("<｜begin▁of▁sentence｜>Hi<｜end▁of▁sentence｜>");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*tok_->Decode(*ids, /*skip_special=*/true), "Hi");
  auto bad = tok_->Decode({1, -5});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("-5"), std::string::npos);
  EXPECT_FALSE(tok_->Decode({tok_->VocabSize()}).ok());
}

TEST_F(DeepSeekTest, ConcurrentEncodesAgreeWithSequentialOnes) {
  const std::vector<std::string> corpus = Corpus();
  std::vector<std::vector<int32_t>> expected;
  for (const auto& text : corpus) expected.push_back(*tok_->Encode(text));
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = t; i < corpus.size() + t; ++i) {
          const size_t k = i % corpus.size();
          auto ids = tok_->Encode(corpus[k]);
          if (!ids.ok() || *ids != expected[k]) ++failures[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

TEST(QwenTest, NfcNormalizesBeforeEncoding) {
  if (!testing::Exists(testing::Qwen3Json())) GTEST_SKIP() << "Qwen3 tokenizer missing";
  auto tok = Tokenizer::FromFile(testing::Qwen3Json());
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "e" + COMBINING ACUTE composes to U+00E9 under NFC.
  EXPECT_EQ(*(*tok)->Encode("caf\x65\xcc\x81"), *(*tok)->Encode("caf\xc3\xa9"));
  EXPECT_EQ(*(*tok)->Decode(*(*tok)->Encode("caf\x65\xcc\x81")), "caf\xc3\xa9");
}

}  // namespace
}  // namespace loom::tokenizer
