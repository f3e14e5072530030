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

std::string ProblemText(const Problem& problem) {
  if (problem.agent_task != nullptr) return TaskText(*problem.agent_task);
  std::string text;
  for (const nlohmann::json& m : problem.messages) {
    if (m.contains("content") && m["content"].is_string())
      text += m["content"].get<std::string>() + "\n";
  }
  return text;
}

std::vector<HeldOutLeak> FindHeldOutLeaks(const std::vector<std::unique_ptr<Dataset>>& datasets,
                                          const DedupOptions& options) {
  struct Entry {
    size_t dataset;
    bool held_out;
    std::string id;
  };
  std::vector<Entry> entries;
  std::vector<std::string> texts;
  for (size_t d = 0; d < datasets.size(); ++d) {
    const Dataset& dataset = *datasets[d];
    if (dataset.TrainSize() == 0) continue;
    for (uint64_t i = 0; i < dataset.TrainSize(); ++i) {  // one epoch: every training problem
      const Problem problem = dataset.Train(i);
      entries.push_back({d, false, problem.TaskId()});
      texts.push_back(ProblemText(problem));
    }
    for (const Problem& problem : dataset.Eval()) {
      entries.push_back({d, true, problem.TaskId()});
      texts.push_back(ProblemText(problem));
    }
  }
  std::map<size_t, std::set<size_t>> leaked;  // dataset -> its held-out entries
  std::map<size_t, std::pair<std::string, double>> example;
  for (const DuplicatePair& p : FindNearDuplicates(texts, options)) {
    const Entry &a = entries[p.a], &b = entries[p.b];
    if (a.held_out == b.held_out) continue;
    const Entry& held_out = a.held_out ? a : b;
    const Entry& trained = a.held_out ? b : a;
    leaked[held_out.dataset].insert(a.held_out ? p.a : p.b);
    example.emplace(held_out.dataset, std::make_pair(held_out.id + " ~ " + trained.id, p.jaccard));
  }
  std::vector<HeldOutLeak> leaks;
  for (const auto& [d, held_out] : leaked) {
    leaks.push_back({datasets[d]->name(), held_out.size(), example[d].first, example[d].second});
  }
  return leaks;
}

}  // namespace loom::tasks
