// Near-duplicate detection: shingles and Jaccard on small cases by hand,
// then MinHash with LSH on the shipped held-out tasks with planted near-
// duplicates, against an exact all-pairs Jaccard computed alongside: every
// pair at or above the threshold is found (recall), every pair found is one
// (precision), and each estimate is near its exact value.

#include "loom/tasks/dedup.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace loom::tasks {
namespace {

TEST(DedupTest, ShinglesAndJaccardByHand) {
  // Words: a b c d -> shingles "a b c", "b c d"; case and punctuation aside.
  EXPECT_EQ(Shingles("a b c d").size(), 2u);
  EXPECT_EQ(Shingles("A, b; C... d!"), Shingles("a b c d"));
  EXPECT_EQ(Shingles("two words").size(), 1u);
  EXPECT_TRUE(Shingles("  ...  ").empty());
  // {abc, bcd} against {abc, bcx}: one in common of three.
  EXPECT_DOUBLE_EQ(Jaccard(Shingles("a b c d"), Shingles("a b c x")), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(Jaccard(Shingles("a b c d"), Shingles("a b c d")), 1.0);
  EXPECT_DOUBLE_EQ(Jaccard({}, {}), 1.0);
  EXPECT_DOUBLE_EQ(Jaccard({1, 2}, {3}), 0.0);
}

// A copy of `text` with every `every`-th word replaced.
std::string Perturb(const std::string& text, int every, int seed) {
  std::string out;
  int word = 0;
  bool in_word = false;
  for (char c : text) {
    const bool letter = std::isalnum(static_cast<unsigned char>(c)) != 0;
    if (letter && !in_word && ++word % every == 0) out += "planted" + std::to_string(seed) + "_";
    in_word = letter;
    out += c;
  }
  return out;
}

TEST(DedupTest, PlantedNearDuplicatesAreFoundAgainstExactJaccard) {
  auto tasks = ReadAgentTasks(LOOM_SOURCE_DIR "/configs/tasks/code-eval.jsonl");
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  std::vector<std::string> texts;
  for (const AgentTask& task : *tasks) texts.push_back(TaskText(task));
  const size_t originals = texts.size();
  // Twelve near-copies: one word in 50 changed (each changes three
  // shingles: Jaccard about 0.89), and
  // four far copies: one word in 3 changed (about 0.2).
  for (int k = 0; k < 16; ++k) texts.push_back(Perturb(texts[k], k < 12 ? 50 : 3, k));

  DedupOptions options;
  const std::vector<DuplicatePair> found = FindNearDuplicates(texts, options);
  std::set<std::pair<size_t, size_t>> got;
  for (const DuplicatePair& p : found) {
    got.insert({p.a, p.b});
    EXPECT_GE(p.jaccard, options.threshold);  // precision, by the exact check
    EXPECT_NEAR(p.estimate, p.jaccard, 0.15) << p.a << " ~ " << p.b;
  }
  // The exact answer, all pairs.
  std::vector<std::vector<uint64_t>> shingles;
  for (const std::string& text : texts) shingles.push_back(Shingles(text));
  std::set<std::pair<size_t, size_t>> truth;
  for (size_t a = 0; a < texts.size(); ++a) {
    for (size_t b = a + 1; b < texts.size(); ++b) {
      if (Jaccard(shingles[a], shingles[b]) >= options.threshold) truth.insert({a, b});
    }
  }
  EXPECT_EQ(got, truth);  // recall and precision both 1
  for (size_t k = 0; k < 12; ++k) EXPECT_EQ(got.count({k, originals + k}), 1u) << k;
  for (size_t k = 12; k < 16; ++k) EXPECT_EQ(got.count({k, originals + k}), 0u) << k;
}

}  // namespace
}  // namespace loom::tasks
