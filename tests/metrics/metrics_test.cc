#include <gtest/gtest.h>

#include "loom/metrics/metrics_writer.h"
#include "loom/metrics/progress.h"
#include "testing/temp_dir.h"

namespace loom::metrics {
namespace {

using loom::testing::ReadAll;
using loom::testing::TempDir;

TEST(MetricsWriterTest, AppendsOneObjectPerLineAcrossReopens) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  {
    auto writer = MetricsWriter::Open(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(writer->Write({{"step", 1}, {"loss", 0.5}}).ok());
  }
  auto writer = MetricsWriter::Open(path);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->Write({{"step", 2}, {"loss", std::nan("")}}).ok());
  EXPECT_EQ(ReadAll(path), "{\"loss\":0.5,\"step\":1}\n{\"loss\":null,\"step\":2}\n");
  auto records = ReadMetrics(path);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[1]["step"], 2);
}

TEST(MetricsWriterTest, CommonFieldsJoinEveryLaterLine) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  auto writer = MetricsWriter::Open(path);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->Write({{"step", 1}}).ok());
  writer->SetCommon("config_version", 3);
  ASSERT_TRUE(writer->Write({{"step", 2}}).ok());
  ASSERT_TRUE(writer->Write({{"step", 3}, {"config_version", 9}}).ok()) << "the line's own wins";
  writer->SetCommon("config_version", 4);
  ASSERT_TRUE(writer->Write({{"step", 4}}).ok());
  EXPECT_EQ(ReadAll(path),
            "{\"step\":1}\n{\"config_version\":3,\"step\":2}\n{\"config_version\":9,\"step\":3}\n"
            "{\"config_version\":4,\"step\":4}\n");
}

TEST(MetricsWriterTest, MalformedLineNamesFileAndLine) {
  TempDir dir;
  const std::string path = dir.Write("m.jsonl", "{\"a\":1}\n{\"a\":\n");
  auto records = ReadMetrics(path);
  ASSERT_FALSE(records.ok());
  EXPECT_EQ(records.status().message(), path + ":2: not a JSON object on one line");
  EXPECT_FALSE(MetricsWriter::Open(dir / "no/such/dir/m.jsonl").ok());
}

TEST(ProgressLineTest, NonTerminalPrintsRarelyAndAlwaysTheLastUpdate) {
  TempDir dir;
  const std::string path = dir / "out";
  std::FILE* out = std::fopen(path.c_str(), "w");
  double now = 0;
  ProgressLine progress(out, {/*is_terminal=*/false, 0.2, 30.0}, [&] { return now; });
  int printed = 0;
  for (int step = 1; step <= 100; ++step) {
    now += 1.0;  // one second per step
    printed += progress.Update("step " + std::to_string(step), step, 100);
  }
  progress.Finish();
  std::fclose(out);
  EXPECT_EQ(printed, 5);  // t=1, 31, 61, 91 and the final step
  const std::string text = ReadAll(path);
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_NE(text.find("step 31 | 31/100 | eta 1m09s\n"), std::string::npos) << text;
  EXPECT_NE(text.find("step 100 | 100/100 | eta 0s\n"), std::string::npos) << text;
}

TEST(ProgressLineTest, TerminalRedrawsInPlace) {
  TempDir dir;
  const std::string path = dir / "out";
  std::FILE* out = std::fopen(path.c_str(), "w");
  double now = 0;
  ProgressLine progress(out, {/*is_terminal=*/true, 0.2, 30.0}, [&] { return now; });
  now = 1;
  EXPECT_TRUE(progress.Update("a", 1, 4));
  now = 1.1;
  EXPECT_FALSE(progress.Update("b", 2, 4));
  now = 2;
  EXPECT_TRUE(progress.Update("c", 3, 4));
  progress.Finish();
  std::fclose(out);
  EXPECT_EQ(ReadAll(path), "\r\033[Ka | 1/4 | eta 3s\r\033[Kc | 3/4 | eta 1s\n");
}

TEST(ProgressLineTest, RunEtaTakesTheStagesRateForItsRestAndTheRunsForLaterStages) {
  double now = 100;
  // Resumed at step 40 of 100, inside a stage that ends at 60.
  RunEta eta(40, 100, [&] { return now; });
  eta.StageStarted(40, 60);
  EXPECT_EQ(eta.Text(40), "run 40/100 eta ?");
  now = 120;  // 10 steps in 20 s: 2 s a step, 10 left here and 40 later at the same rate
  EXPECT_EQ(eta.Text(50), "run 50/100 eta 1m40s");
  now = 140;
  eta.StageStarted(60, 100);  // a slower stage: 4 s a step
  now = 160;
  // 35 left at this stage's 4 s a step; nothing after it.
  EXPECT_EQ(eta.Text(65), "run 65/100 eta 2m20s");
  TempDir dir;
  const std::string path = dir / "out";
  std::FILE* out = std::fopen(path.c_str(), "w");
  ProgressLine progress(out, {/*is_terminal=*/false, 0.2, 30.0}, [&] { return now; });
  now = 164;
  EXPECT_TRUE(progress.Update("grpo step 2", 2, 10, eta.Text(66)));
  std::fclose(out);
  EXPECT_EQ(ReadAll(path), "grpo step 2 | 2/10 | eta 16s | run 66/100 eta 2m16s\n");
}

TEST(ProgressLineTest, FormatDuration) {
  EXPECT_EQ(ProgressLine::FormatDuration(42.4), "42s");
  EXPECT_EQ(ProgressLine::FormatDuration(185), "3m05s");
  EXPECT_EQ(ProgressLine::FormatDuration(3720), "1h02m");
  EXPECT_EQ(ProgressLine::FormatDuration(-1), "?");
}

}  // namespace
}  // namespace loom::metrics
