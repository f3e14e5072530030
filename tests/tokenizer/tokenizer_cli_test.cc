// The tokenizer's commands run as the real `loom` binary:
// init-tokenizer, tokenize (both directions) and bench tokenizer.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "loom/tokenizer/tokenizer.h"
#include "testing/temp_dir.h"

namespace loom::tokenizer {
namespace {

using loom::testing::RunLoom;
using loom::testing::TempDir;

TEST(TokenizerCliTest, InitTokenizerWritesALoadableTinyTokenizer) {
  TempDir dir;
  auto result = RunLoom("init-tokenizer --out " + dir / "tok.json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto tok = Tokenizer::FromFile(dir / "tok.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*(*tok)->Encode("<｜User｜>A"), (std::vector<int32_t>{261, 65}));
}

TEST(TokenizerCliTest, TokenizeEncodesAndDecodesJsonLines) {
  TempDir dir;
  ASSERT_EQ(RunLoom("init-tokenizer --out " + dir / "tok.json").exit_code, 0);
  dir.Write("in.jsonl", "\"Hi\"\n\"<think>\\u00e9\"\n");
  auto encoded =
      RunLoom("tokenize --tokenizer " + dir / "tok.json" + " --input " + dir / "in.jsonl");
  ASSERT_EQ(encoded.exit_code, 0) << encoded.err;
  EXPECT_EQ(encoded.out, "[72,105]\n[258,195,169]\n");
  dir.Write("ids.jsonl", encoded.out);
  auto decoded = RunLoom("tokenize --decode --tokenizer " + dir / "tok.json" + " --input " +
                         dir / "ids.jsonl");
  ASSERT_EQ(decoded.exit_code, 0) << decoded.err;
  EXPECT_EQ(decoded.out, "\"Hi\"\n\"<think>é\"\n");
}

TEST(TokenizerCliTest, MalformedInputLineIsNamed) {
  TempDir dir;
  ASSERT_EQ(RunLoom("init-tokenizer --out " + dir / "tok.json").exit_code, 0);
  dir.Write("in.jsonl", "\"ok\"\n[1, 2]\n");
  auto result =
      RunLoom("tokenize --tokenizer " + dir / "tok.json" + " --input " + dir / "in.jsonl");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("in.jsonl:2"), std::string::npos) << result.err;
  dir.Write("bad.jsonl", "[99999]\n");
  result = RunLoom("tokenize --decode --tokenizer " + dir / "tok.json" + " --input " +
                   dir / "bad.jsonl");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("99999"), std::string::npos) << result.err;
  result = RunLoom("tokenize --tokenizer " + dir / "missing.json");
  EXPECT_EQ(result.exit_code, 2);
}

TEST(TokenizerCliTest, BenchPrintsJsonOnTheLastLine) {
  TempDir dir;
  ASSERT_EQ(RunLoom("init-tokenizer --out " + dir / "tok.json").exit_code, 0);
  dir.Write("corpus.txt", "hello world\nsecond line\n");
  auto result = RunLoom("bench tokenizer --json --tokenizer " + dir / "tok.json" + " --corpus " +
                        dir / "corpus.txt");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto last = nlohmann::json::parse(result.out);
  EXPECT_EQ(last["bytes"], 24);
  EXPECT_EQ(last["tokens"], 24);
  EXPECT_GT(last["mb_per_s"].get<double>(), 0.0);
}

}  // namespace
}  // namespace loom::tokenizer
