#include "loom/tasks/dedup.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "loom/base/random.h"
#include "tasks/random.h"

namespace loom::tasks {

std::vector<uint64_t> Shingles(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text + " ") {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '_') {
      word += static_cast<char>(std::tolower(u));
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  std::vector<uint64_t> shingles;
  const size_t n = words.size() < 3 ? 1 : words.size() - 2;
  for (size_t i = 0; i < n && !words.empty(); ++i) {
    std::string shingle;
    for (size_t k = i; k < std::min(i + 3, words.size()); ++k) shingle += words[k] + ' ';
    shingles.push_back(HashText(shingle));
  }
  std::sort(shingles.begin(), shingles.end());
  shingles.erase(std::unique(shingles.begin(), shingles.end()), shingles.end());
  return shingles;
}

double Jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  if (a.empty() && b.empty()) return 1.0;
  size_t common = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i] == b[j]) {
      ++common, ++i, ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return static_cast<double>(common) / static_cast<double>(a.size() + b.size() - common);
}

std::string TaskText(const AgentTask& task) {
  std::string text = task.task.problem();
  const auto& files = task.task.environment().files();
  const std::map<std::string, std::string> sorted(files.begin(), files.end());
  for (const auto& [path, content] : sorted) text += "\n" + path + "\n" + content;
  return text;
}

std::vector<DuplicatePair> FindNearDuplicates(const std::vector<std::string>& texts,
                                              const DedupOptions& options) {
  const int hashes = options.bands * options.rows;
  std::vector<std::vector<uint64_t>> shingles, signatures;
  for (const std::string& text : texts) {
    shingles.push_back(Shingles(text));
    std::vector<uint64_t> signature(hashes, std::numeric_limits<uint64_t>::max());
    for (uint64_t s : shingles.back()) {
      for (int h = 0; h < hashes; ++h) {
        signature[h] = std::min(signature[h], Mix64(s ^ Mix64(options.seed + h + 1)));
      }
    }
    signatures.push_back(std::move(signature));
  }
  // Candidates: texts that agree on every row of some band.
  std::set<std::pair<size_t, size_t>> candidates;
  for (int band = 0; band < options.bands; ++band) {
    std::map<uint64_t, std::vector<size_t>> buckets;
    for (size_t t = 0; t < texts.size(); ++t) {
      uint64_t key = Mix64(static_cast<uint64_t>(band));
      for (int r = 0; r < options.rows; ++r)
        key = Mix64(key ^ signatures[t][band * options.rows + r]);
      buckets[key].push_back(t);
    }
    for (const auto& [key, members] : buckets) {
      for (size_t i = 0; i < members.size(); ++i) {
        for (size_t j = i + 1; j < members.size(); ++j) candidates.insert({members[i], members[j]});
      }
    }
  }
  std::vector<DuplicatePair> pairs;
  for (const auto& [a, b] : candidates) {
    int agree = 0;
    for (int h = 0; h < hashes; ++h) agree += signatures[a][h] == signatures[b][h];
    const double jaccard = Jaccard(shingles[a], shingles[b]);
    if (jaccard < options.threshold) continue;
    pairs.push_back({a, b, static_cast<double>(agree) / hashes, jaccard});
  }
  return pairs;
}

}  // namespace loom::tasks
