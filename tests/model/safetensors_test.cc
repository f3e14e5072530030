// The safetensors reader and writer, including malformed files.

#include "loom/model/safetensors.h"

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/temp_dir.h"

namespace loom::model {
namespace {

using loom::testing::TempDir;

// A file with `header` as its JSON header and `data_bytes` bytes of data.
std::string RawFile(const std::string& header, size_t data_bytes, uint64_t claimed_size = 0) {
  uint64_t n = claimed_size ? claimed_size : header.size();
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header + std::string(data_bytes, '\0');
}

TEST(SafetensorsTest, RoundTripIsBitExactForEveryFloatType) {
  TempDir dir;
  TensorMap tensors;
  tensors["a.f32"] = at::randn({3, 5});
  tensors["b.bf16"] = at::randn({7}).to(at::kBFloat16);
  tensors["c.f16"] = at::randn({2, 2, 3}).to(at::kHalf);
  tensors["d.i16"] = at::randint(100, {4, 2}, at::kShort);
  tensors["e.empty"] = at::zeros({0, 4});
  ASSERT_TRUE(WriteSafetensors(dir / "m.safetensors", tensors).ok());
  auto read = ReadSafetensors(dir / "m.safetensors");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(read->at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(at::equal(read->at(name), t)) << name;
  }
}

TEST(SafetensorsTest, HeaderIsPaddedAndHasFormatMetadata) {
  TempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir / "m.safetensors", {{"x", at::ones({1})}}).ok());
  std::string raw = loom::testing::ReadAll(dir / "m.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_NE(raw.find("\"format\":\"pt\""), std::string::npos);
}

TEST(SafetensorsTest, ShardedDirectoryFollowsTheIndex) {
  TempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir / "s1.safetensors", {{"a", at::ones({2})}}).ok());
  ASSERT_TRUE(WriteSafetensors(dir / "s2.safetensors", {{"b", at::zeros({3})}}).ok());
  dir.Write("model.safetensors.index.json",
            R"({"metadata": {}, "weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  auto all = ReadModelTensors(dir.path());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 2u);
  dir.Write("model.safetensors.index.json", R"({"weight_map": {"a": "s2.safetensors"}})");
  auto wrong = ReadModelTensors(dir.path());
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("'a' is not in s2.safetensors"), std::string::npos);
}

struct Malformed {
  const char* what;
  std::string bytes;
  const char* message_part;
};

// Tensors of 400 bytes each, named so that name order is a0, a1, ...
TensorMap FourHundredByteTensors(int n) {
  TensorMap tensors;
  for (int i = 0; i < n; ++i) tensors["a" + std::to_string(i)] = at::full({100}, i, at::kFloat);
  return tensors;
}

TEST(SafetensorsTest, ModelTensorsShardPastTheLimitWithAnHfIndex) {
  TempDir dir;
  TensorMap tensors = FourHundredByteTensors(5);
  tensors["big"] = at::randn({300});  // 1200 bytes: over the limit, a shard of its own
  ASSERT_TRUE(WriteModelTensors(dir.path(), tensors, /*max_shard_bytes=*/800).ok());
  auto index = nlohmann::json::parse(loom::testing::ReadAll(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 5 * 400 + 1200);
  // Name order: a0 a1 | a2 a3 | a4 | big.
  EXPECT_EQ(index["weight_map"]["a0"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["a1"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["a2"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["a4"], "model-00003-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["big"], "model-00004-of-00004.safetensors");
  auto read = ReadModelTensors(dir.path());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), tensors.size());
  for (const auto& [name, t] : tensors) EXPECT_TRUE(at::equal(read->at(name), t)) << name;
}

TEST(SafetensorsTest, ModelTensorsRemoveTheOtherLayoutsStaleFiles) {
  TempDir dir;
  dir.Write("model-00009-of-00009.safetensors", "stale");
  dir.Write("tokenizer.json", "{}");
  ASSERT_TRUE(WriteModelTensors(dir.path(), FourHundredByteTensors(1), 800).ok());
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model-00009-of-00009.safetensors"));
  ASSERT_TRUE(WriteModelTensors(dir.path(), FourHundredByteTensors(4), 800).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "model-00002-of-00002.safetensors"));
  ASSERT_TRUE(WriteModelTensors(dir.path(), FourHundredByteTensors(2), 800).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "tokenizer.json"));
  auto read = ReadModelTensors(dir.path());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), 2u);
}

TEST(SafetensorsTest, MalformedFilesAreClearErrors) {
  const std::string ok_entry =
      R"({"x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})";
  std::vector<Malformed> cases = {
      {"empty", "", "too short"},
      {"header length beyond the file", RawFile(ok_entry, 16, 1ull << 40), "exceeds the file"},
      {"header length huge", RawFile(ok_entry, 16, ~0ull), "exceeds the file"},
      {"not json", RawFile("{oops", 0), "not a JSON object"},
      {"data truncated", RawFile(ok_entry, 8), "truncated"},
      {"shape lies",
       RawFile(R"({"x": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 16]}})", 16),
       "does not match"},
      {"overflowing shape",
       RawFile(
           R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 16]}})",
           16),
       "does not match"},
      {"negative dim",
       RawFile(R"({"x": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}})", 16),
       "does not match"},
      {"unknown dtype",
       RawFile(R"({"x": {"dtype": "F8_E4M3", "shape": [16], "data_offsets": [0, 16]}})", 16),
       "unsupported dtype"},
      {"offsets reversed",
       RawFile(R"({"x": {"dtype": "U8", "shape": [0], "data_offsets": [9, 3]}})", 16), "exceed"},
      {"overlap",
       RawFile(R"({"x": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                   "y": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}})",
               16),
       "overlap"},
      {"entry not an object", RawFile(R"({"x": 5})", 0), "needs dtype"},
  };
  TempDir dir;
  for (const auto& c : cases) {
    std::string path = dir.Write("bad.safetensors", c.bytes);
    auto result = ReadSafetensors(path);
    ASSERT_FALSE(result.ok()) << c.what;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(result.status().message().find(c.message_part), std::string::npos)
        << c.what << ": " << result.status();
  }
  EXPECT_EQ(ReadSafetensors(dir / "missing.safetensors").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace loom::model
