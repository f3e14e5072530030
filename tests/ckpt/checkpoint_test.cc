#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "loom/ckpt/checkpoint.h"
#include "testing/temp_dir.h"

namespace loom::ckpt {
namespace {

namespace fs = std::filesystem;
using loom::testing::ReadAll;
using loom::testing::TempDir;

std::string WriteCheckpoint(const std::string& root, int64_t step, const std::string& payload) {
  auto writer = CheckpointWriter::Begin(root, step);
  EXPECT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE(writer->AddFile("model/weights.bin", payload).ok());
  EXPECT_TRUE(writer->AddFile("state.json", "{\"step\": " + std::to_string(step) + "}").ok());
  auto dir = writer->Commit({{"stage", "grpo"}, {"inflight_samples", 3}});
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : "";
}

void FlipByte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST(CheckpointTest, CommitWritesManifestAndLatest) {
  TempDir dir;
  const std::string root = dir / "checkpoints";
  const std::string path = WriteCheckpoint(root, 42, std::string(5000, 'x'));
  EXPECT_EQ(path, root + "/step-00000042");
  EXPECT_EQ(ReadAll(root + "/latest"), "step-00000042\n");
  auto manifest = VerifyCheckpoint(path);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->step, 42);
  EXPECT_EQ(manifest->meta["inflight_samples"], 3);
  ASSERT_EQ(manifest->files.size(), 2u);
  EXPECT_EQ(manifest->files[0].path, "model/weights.bin");
  EXPECT_EQ(manifest->files[0].bytes, 5000u);
  // Nothing temporary is left behind.
  for (const auto& entry : fs::directory_iterator(root)) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp", 0), 0u) << entry.path();
  }
}

TEST(CheckpointTest, CorruptionIsDetectedAndAutoFallsBack) {
  TempDir dir;
  const std::string root = dir / "checkpoints";
  WriteCheckpoint(root, 1, std::string(100, 'a'));
  const std::string newest = WriteCheckpoint(root, 2, std::string(100, 'b'));
  FlipByte(newest + "/model/weights.bin", 17);
  auto verified = VerifyCheckpoint(newest);
  ASSERT_FALSE(verified.ok());
  EXPECT_EQ(verified.status().message(),
            newest + "/model/weights.bin: checksum mismatch (corrupt file)");
  auto resume = ResolveResume(root, "auto");
  ASSERT_TRUE(resume.ok()) << resume.status();
  ASSERT_TRUE(resume->has_value());
  EXPECT_EQ((*resume)->dir, root + "/step-00000001");
  ASSERT_EQ((*resume)->warnings.size(), 1u);
  EXPECT_NE((*resume)->warnings[0].find("skipping checkpoint " + newest), std::string::npos);
  // An explicit path is not second-guessed.
  EXPECT_FALSE(ResolveResume(root, newest).ok());
}

TEST(CheckpointTest, TruncationMissingFilesAndBadManifests) {
  TempDir dir;
  const std::string root = dir / "checkpoints";
  const std::string path = WriteCheckpoint(root, 5, std::string(1000, 'z'));
  fs::resize_file(path + "/model/weights.bin", 10);
  EXPECT_EQ(VerifyCheckpoint(path).status().message(),
            path + "/model/weights.bin: size 10 bytes, manifest says 1000");
  fs::remove(path + "/state.json");
  EXPECT_EQ(VerifyCheckpoint(path).status().code(), absl::StatusCode::kDataLoss);
  for (const std::string bad : {"", "{", "[]", "{\"step\": 1}", "{\"step\": 1, \"files\": [3]}",
                                "{\"step\": 1, \"files\": [{\"path\": \"../x\", \"bytes\": 1, "
                                "\"crc32\": 1}]}"}) {
    std::ofstream(path + "/manifest.json") << bad;
    auto status = VerifyCheckpoint(path).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << bad;
  }
  auto resume = ResolveResume(root, "auto");
  ASSERT_FALSE(resume.ok());
  EXPECT_NE(resume.status().message().find("no loadable checkpoint in " + root),
            std::string::npos);
}

TEST(CheckpointTest, FreshRootResumesFromNothing) {
  TempDir dir;
  auto resume = ResolveResume(dir / "checkpoints", "auto");
  ASSERT_TRUE(resume.ok());
  EXPECT_FALSE(resume->has_value());
}

TEST(CheckpointTest, AbandonedWriterLeavesNothingAndLeftoversAreCleaned) {
  TempDir dir;
  const std::string root = dir / "checkpoints";
  {
    auto writer = CheckpointWriter::Begin(root, 3);
    ASSERT_TRUE(writer->AddFile("a", "b").ok());
  }
  EXPECT_TRUE(ListCheckpoints(root).empty());
  fs::create_directories(root + "/.tmp-step-00000009-1");
  WriteCheckpoint(root, 4, "x");
  EXPECT_FALSE(fs::exists(root + "/.tmp-step-00000009-1"));
}

TEST(CheckpointTest, ResavingAStepReplacesIt) {
  TempDir dir;
  const std::string root = dir / "checkpoints";
  WriteCheckpoint(root, 7, "first");
  const std::string path = WriteCheckpoint(root, 7, "second!");
  EXPECT_EQ(ReadAll(path + "/model/weights.bin"), "second!");
  EXPECT_TRUE(VerifyCheckpoint(path).ok());
  EXPECT_EQ(ListCheckpoints(root).size(), 1u);
}

TEST(CheckpointTest, RetentionKeepsLastEveryAndLatest) {
  TempDir dir;
  const std::string root = dir / "checkpoints";
  for (int step = 1; step <= 12; ++step) WriteCheckpoint(root, step, "p");
  ASSERT_TRUE(ApplyRetention(root, 2, 5).ok());
  std::vector<std::string> names;
  for (const auto& d : ListCheckpoints(root)) names.push_back(fs::path(d).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000005", "step-00000010", "step-00000011",
                                             "step-00000012"}));
  EXPECT_FALSE(ApplyRetention(root, 0, 0).ok());
}

// A child process writes checkpoints in a loop and is killed with SIGKILL at a
// random moment; whatever it left must resume from a verified checkpoint, and
// `latest`, when present, must itself verify.
TEST(CheckpointTest, KillNineAtAnyMomentNeverBreaksLatest) {
  TempDir dir;
  const std::string root = dir / "checkpoints";
  std::mt19937 rng(1234);
  int64_t next_step = 1;
  for (int round = 0; round < 40; ++round) {
    const int64_t first_step = next_step;
    const unsigned seed = rng();
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::mt19937 child_rng(seed);
      for (int64_t step = first_step;; ++step) {
        auto writer = CheckpointWriter::Begin(root, step);
        if (!writer.ok()) ::_exit(3);
        std::string payload(child_rng() % 300000, static_cast<char>('a' + step % 26));
        if (!writer->AddFile("model/weights.bin", payload).ok()) ::_exit(4);
        if (!writer->AddFile("state.json", std::to_string(step)).ok()) ::_exit(5);
        if (!writer->Commit({{"round", step}}).ok()) ::_exit(6);
        if (!ApplyRetention(root, 3, 0).ok()) ::_exit(7);
      }
    }
    ::usleep(5000 + rng() % 150000);
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited early with " << WEXITSTATUS(status);
    auto resume = ResolveResume(root, "auto");
    ASSERT_TRUE(resume.ok()) << "round " << round << ": " << resume.status();
    const std::string latest = ReadAll(root + "/latest");
    if (!latest.empty()) {
      const std::string latest_dir = root + "/" + latest.substr(0, latest.size() - 1);
      auto manifest = VerifyCheckpoint(latest_dir);
      ASSERT_TRUE(manifest.ok()) << "round " << round << ": " << manifest.status();
      ASSERT_TRUE(resume->has_value());
      EXPECT_EQ((*resume)->dir, latest_dir);
      next_step = manifest->step + 1;
    }
  }
  EXPECT_GT(next_step, 1);
}

}  // namespace
}  // namespace loom::ckpt
