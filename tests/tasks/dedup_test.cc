// Near-duplicate detection: shingles and Jaccard on small cases by hand,
// then MinHash with LSH on the shipped held-out tasks with planted near-
// duplicates, against an exact all-pairs Jaccard computed alongside: every
// pair at or above the threshold is found (recall), every pair found is one
// (precision), and each estimate is near its exact value.

#include "loom/tasks/dedup.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "testing/temp_dir.h"

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

namespace loom::tasks {
namespace {

// A run's warning about leaks: the held-out problems of a file dataset that
// near-duplicate its training problems (or another dataset's), and nothing
// for datasets that do not.
TEST(DedupTest, HeldOutProblemsThatNearDuplicateTrainingOnesAreFound) {
  testing::TempDir dir;
  auto line = [](const std::string& id, const std::string& prompt) {
    return R"({"id":")" + id + R"(","messages":[{"role":"user","content":")" + prompt +
           R"("}],"answer":"1"})" + "\n";
  };
  const std::string train =
      dir.Write("train.jsonl", line("t1", "Sort the numbers 4 9 1 7 3 in ascending order now") +
                                   line("t2", "Reverse the letters of the word planet please") +
                                   line("t3", "Name the capital city of the country of France"));
  const std::string eval = dir.Write(
      "eval.jsonl", line("e1", "Sort the numbers 4 9 1 7 3 in ascending order now!") +
                        line("e2", "Count the vowels in the sentence the quick brown fox"));
  const std::string clean =
      dir.Write("clean.jsonl", line("c1", "What is the square root of eighty one exactly") +
                                   line("c2", "Spell the number seventeen in words for me"));
  const std::string clean_eval =
      dir.Write("clean-eval.jsonl", line("c3", "How many legs does a spider have in total"));
  std::vector<std::unique_ptr<Dataset>> datasets;
  for (const auto& [name, eval_path] : {std::pair<std::string, std::string>{"leaky", eval},
                                        std::pair<std::string, std::string>{"clean", clean_eval}}) {
    config::DatasetSection spec;
    spec.name = name;
    spec.kind = "jsonl";
    spec.path = name == "leaky" ? train : clean;
    spec.eval_path = eval_path;
    auto dataset = LoadDataset(spec, 1);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    datasets.push_back(*std::move(dataset));
  }
  const std::vector<HeldOutLeak> leaks = FindHeldOutLeaks(datasets);
  ASSERT_EQ(leaks.size(), 1u);
  EXPECT_EQ(leaks[0].dataset, "leaky");
  EXPECT_EQ(leaks[0].held_out, 1u);
  EXPECT_EQ(leaks[0].example, "e1 ~ t1");
  EXPECT_DOUBLE_EQ(leaks[0].jaccard, 1.0);  // the "!" is not a word
}

}  // namespace
}  // namespace loom::tasks
