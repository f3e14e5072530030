// RemoveTree against what `rm -r` would leave: the tree is gone, symbolic
// links are removed without touching their targets, a missing path is fine,
// and an entry that cannot be removed is named.

#include "loom/config/files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

TEST(RemoveTreeTest, RemovesNestedTreesButNotWhatLinksPointTo) {
  testing::TempDir dir;
  const std::string outside = dir.Write("outside/keep.txt", "keep");
  dir.Write("tree/a/b/c.txt", "c");
  dir.Write("tree/a/d.txt", "d");
  fs::create_directories(dir / "tree/empty");
  fs::create_symlink(outside, dir / "tree/a/link-to-file");
  fs::create_directory_symlink(dir / "outside", dir / "tree/link-to-dir");
  ASSERT_TRUE(RemoveTree(dir / "tree").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir / "tree")));
  EXPECT_TRUE(fs::exists(outside)) << "a link's target must survive";
  EXPECT_TRUE(fs::exists(dir / "outside"));
}

TEST(RemoveTreeTest, AMissingPathAndASingleFileAreFine) {
  testing::TempDir dir;
  EXPECT_TRUE(RemoveTree(dir / "nothing-here").ok());
  const std::string file = dir.Write("one.txt", "1");
  EXPECT_TRUE(RemoveTree(file).ok());
  EXPECT_FALSE(fs::exists(file));
}

TEST(RemoveTreeTest, AnEntryThatCannotBeRemovedIsNamed) {
  // Nobody, root included, can unlink a procfs entry.
  absl::Status s = RemoveTree("/proc/self/status");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/proc/self/status"), std::string::npos) << s;
}

}  // namespace
}  // namespace loom
