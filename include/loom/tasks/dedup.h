#pragma once
// Near-duplicate tasks: MinHash signatures over each task's word 3-shingles,
// banded into an LSH index so that only likely pairs are compared, then
// every candidate pair's Jaccard estimated from its signatures and checked
// exactly on its shingle sets. `loom tasks dedup` runs it on task files.
//
// With `hashes` = bands × rows, a pair of Jaccard similarity s becomes a
// candidate with probability 1 - (1 - s^rows)^bands: for the defaults (32
// bands of 4) 0.9999 at s = 0.8 and 0.87 at s = 0.5.

#include <cstdint>
#include <string>
#include <vector>

#include "loom/tasks/agent_jsonl.h"
#include "loom/tasks/dataset.h"

namespace loom::tasks {

// The sorted, distinct hashes of the word 3-shingles of `text` (words:
// runs of letters, digits and '_', lowercased); a text of fewer than three
// words is one shingle of what it has.
std::vector<uint64_t> Shingles(const std::string& text);

// |a ∩ b| / |a ∪ b| of two sorted sets (1 for two empty ones).
double Jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b);

// What a task is compared by: its problem, then its environment's files in
// path order (path and content).
std::string TaskText(const AgentTask& task);

struct DedupOptions {
  double threshold = 0.8;  // pairs whose exact Jaccard is at least this
  int bands = 32;
  int rows = 4;
  uint64_t seed = 0;
};

struct DuplicatePair {
  size_t a = 0, b = 0;  // indices into the texts, a < b
  double estimate = 0;  // from the MinHash signatures
  double jaccard = 0;   // exact, on the shingle sets
};

// The pairs of `texts` whose exact Jaccard reaches the threshold among the
// LSH candidates, by (a, b).
std::vector<DuplicatePair> FindNearDuplicates(const std::vector<std::string>& texts,
                                              const DedupOptions& options = {});

// What a problem is compared by: an agent task's TaskText, a single-turn
// problem's prompt (its messages' contents).
std::string ProblemText(const Problem& problem);

// Held-out problems of a dataset that near-duplicate a training problem of
// any of the datasets (file datasets: a generator has no finite training
// set to compare with): they measure recall more than generalisation.
struct HeldOutLeak {
  std::string dataset;
  size_t held_out = 0;  // its held-out problems with a near-duplicate in training
  std::string example;  // "held-out id ~ training id"
  double jaccard = 0;   // the example's
};
std::vector<HeldOutLeak> FindHeldOutLeaks(const std::vector<std::unique_ptr<Dataset>>& datasets,
                                          const DedupOptions& options = {});

}  // namespace loom::tasks
