#pragma once
// The byte-level BPE model: a vocabulary, ranked merges and the merge loop.
// Immutable after construction; safe to use from many threads.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace loom::tokenizer {

class Bpe {
 public:
  // Adds vocabulary entry `token` (byte-level text) with `id`.
  void AddToken(const std::string& token, int32_t id);
  // Adds the merge of rank `rank` (0 = applied first). Fails, naming the
  // tokens, when either side or their concatenation is not in the vocabulary.
  absl::Status AddMerge(const std::string& left, const std::string& right, int32_t rank);
  // Precomputes the byte → id table; call after the vocabulary is complete.
  void Finish(bool ignore_merges);

  // Appends the ids of one pre-tokenized piece of raw bytes (`word`).
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;

  const absl::flat_hash_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* FindMerge(int32_t left, int32_t right) const;
  void MergeSmall(std::vector<int32_t>* symbols) const;
  void MergeLarge(std::vector<int32_t>* symbols) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256];  // id of each byte's byte-level character, -1 if absent
  bool ignore_merges_ = false;
};

}  // namespace loom::tokenizer
