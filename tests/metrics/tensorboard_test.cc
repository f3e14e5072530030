// TensorBoard event files, read back by an independent reader
// (tests/metrics/read_tfevents.py: its own TFRecord framing, CRC-32C and
// protobuf wire decoding): every number of every metrics line is a scalar
// with the documented tag and step; a file cut short mid-record still reads
// up to its last complete record.

#include "loom/metrics/tensorboard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "loom/metrics/metrics_writer.h"
#include "testing/temp_dir.h"

namespace loom::metrics {
namespace {

using loom::testing::ReadAll;
using loom::testing::TempDir;

const std::string kReader = "/usr/bin/python3 " LOOM_SOURCE_DIR "/tests/metrics/read_tfevents.py ";

nlohmann::json ReadEvents(const std::string& path, int* exit_code = nullptr) {
  auto result = loom::testing::RunCommand(kReader + path);
  if (exit_code != nullptr) *exit_code = result.exit_code;
  if (result.exit_code != 0) return nlohmann::json();
  return nlohmann::json::parse(result.out);
}

std::string OnlyEventFile(const std::string& dir) {
  std::string found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_TRUE(found.empty()) << "more than one event file in " << dir;
    found = entry.path().string();
  }
  EXPECT_EQ(std::filesystem::path(found).filename().string().rfind("events.out.tfevents.", 0), 0u);
  return found;
}

TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Crc32c("", 0), 0u);
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
}

// Writes metrics lines through a MetricsWriter with TensorBoard attached.
class TensorBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto writer = MetricsWriter::Open(dir_ / "metrics.jsonl");
    ASSERT_TRUE(writer.ok());
    auto tensorboard = TensorBoardWriter::Open(dir_ / "tb");
    ASSERT_TRUE(tensorboard.ok()) << tensorboard.status();
    ASSERT_TRUE((*tensorboard)->WriteText("config", "    run: {name: x}\n", 1.0).ok());
    writer->AttachTensorBoard(*std::move(tensorboard));
    writer->SetCommon("config_version", 2);
    for (const nlohmann::json& line : Lines()) ASSERT_TRUE(writer->Write(line).ok());
    path_ = OnlyEventFile(dir_ / "tb");
  }

  static std::vector<nlohmann::json> Lines() {
    return {{{"stage", "sft"}, {"step", 1}, {"version", 1}, {"loss", 2.5}, {"lr", 1e-4}},
            {{"stage", "grpo"},
             {"step", 1},
             {"version", 7},
             {"reward_by_effort", {{"25", 0.5}, {"100", -0.25}}},
             {"batch_config_versions", {1, 2}},
             {"mixed", true},
             {"name", "text is no scalar"}},
            {{"event", "teacher_eval"}, {"stage", "opd"}, {"teacher", "big"}, {"eval_accuracy", 1}},
            {{"event", "resume"}}};
  }

  TempDir dir_;
  std::string path_;
};

TEST_F(TensorBoardTest, EveryNumberIsAScalarWithItsTagAndStep) {
  const nlohmann::json events = ReadEvents(path_);
  ASSERT_TRUE(events.is_object());
  EXPECT_EQ(events["file_version"], "brain.Event:2");
  EXPECT_TRUE(events["complete"].get<bool>());
  using Scalar = std::tuple<int64_t, std::string, double>;
  std::vector<Scalar> scalars;
  for (const auto& s : events["scalars"]) scalars.emplace_back(s[0], s[1], s[2]);
  const std::vector<Scalar> expected = {
      {1, "sft/config_version", 2},
      {1, "sft/loss", 2.5},
      {1, "sft/lr", static_cast<float>(1e-4)},
      {1, "sft/step", 1},
      {1, "sft/version", 1},
      {7, "grpo/batch_config_versions/0", 1},
      {7, "grpo/batch_config_versions/1", 2},
      {7, "grpo/config_version", 2},
      {7, "grpo/reward_by_effort/100", -0.25},
      {7, "grpo/reward_by_effort/25", 0.5},
      {7, "grpo/step", 1},
      {7, "grpo/version", 7},
      {0, "opd/teacher_eval/big/config_version", 2},
      {0, "opd/teacher_eval/big/eval_accuracy", 1},
      {0, "run/resume/config_version", 2},
  };
  EXPECT_EQ(scalars, expected);
  ASSERT_EQ(events["texts"].size(), 1u);
  EXPECT_EQ(events["texts"][0][0], "config");
  EXPECT_EQ(events["texts"][0][1], "    run: {name: x}\n");
  EXPECT_EQ(events["texts"][0][2], "text");
  // The reader's own tag rule, applied to metrics.jsonl, agrees.
  auto compared = loom::testing::RunCommand(kReader + "--compare " + dir_.path());
  EXPECT_EQ(compared.exit_code, 0) << compared.out << compared.err;
  // ... and notices a number TensorBoard did not get.
  { std::ofstream(dir_ / "metrics.jsonl", std::ios::app) << "{\"stage\":\"sft\",\"loss\":1}\n"; }
  compared = loom::testing::RunCommand(kReader + "--compare " + dir_.path());
  EXPECT_EQ(compared.exit_code, 1) << compared.out;
}

TEST_F(TensorBoardTest, AFileCutMidRecordReadsUpToItsLastCompleteRecord) {
  const std::string bytes = ReadAll(path_);
  const nlohmann::json whole = ReadEvents(path_);
  const int64_t records = whole["records"];
  ASSERT_EQ(records, 6) << "file version, config text, four lines with numbers";
  // Offsets of record ends, from the framing (8 + 4 + length + 4).
  std::vector<size_t> ends;
  for (size_t pos = 0; pos < bytes.size();) {
    uint64_t length = 0;
    std::memcpy(&length, bytes.data() + pos, 8);
    pos += 16 + length;
    ends.push_back(pos);
  }
  ASSERT_EQ(ends.size(), 6u);
  ASSERT_EQ(ends.back(), bytes.size());
  for (size_t cut : {ends[2] + 1, ends[2] + 12, ends[3] - 1, bytes.size() - 3}) {
    const std::string truncated = dir_ / "cut";
    { std::ofstream(truncated, std::ios::binary) << bytes.substr(0, cut); }
    const nlohmann::json read = ReadEvents(truncated);
    ASSERT_TRUE(read.is_object()) << cut;
    EXPECT_FALSE(read["complete"].get<bool>()) << cut;
    const size_t complete =
        static_cast<size_t>(std::upper_bound(ends.begin(), ends.end(), cut) - ends.begin());
    EXPECT_EQ(read["records"].get<size_t>(), complete) << cut;
  }
  // A flipped payload byte fails the CRC check.
  std::string corrupt = bytes;
  corrupt[ends[1] + 14] ^= 0x10;
  { std::ofstream(dir_ / "corrupt", std::ios::binary) << corrupt; }
  int exit_code = 0;
  ReadEvents(dir_ / "corrupt", &exit_code);
  EXPECT_EQ(exit_code, 2);
}

TEST(TensorBoardWriterTest, AnUnwritableDirectoryIsAClearError) {
  auto writer = TensorBoardWriter::Open("/proc/loom-no-such/tb");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("/proc/loom-no-such/tb"), std::string::npos);
}

}  // namespace
}  // namespace loom::metrics
