#pragma once
// TeacherPool: the teachers of on-policy distillation, any number of them,
// of any supported architecture and size, behind a device-memory budget.
//
// Open checks every teacher once, at start, from its config.json and
// tokenizer.json only: its vocabulary must be the student's (the same
// vocab_size and the same token for every id), or the run is refused with an
// error naming the teacher. Weights are read later, when a teacher is first
// needed (the safetensors file is memory-mapped, so the host keeps every
// teacher's file in the page cache as memory allows); at most
// `memory_bytes` of teacher parameters are resident on the device, the least
// recently used teacher evicted to make room. Teachers run without gradients
// and route their own MoE experts.
//
// Run loop thread only.

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/model/transformer.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::algo {

struct TeacherSpec {
  std::string name;
  std::string path;  // HF model directory
};

struct TeacherPoolOptions {
  at::ScalarType dtype = at::kFloat;  // parameters on the device (the student's dtype)
  at::Device device = at::kCPU;
  int64_t memory_bytes = 0;  // resident budget; 0 = no limit
};

struct TeacherPoolStats {
  int64_t loads = 0;      // teachers brought onto the device
  int64_t evictions = 0;  // teachers dropped to make room
  double load_seconds = 0;
  int64_t resident_bytes = 0;
  int64_t peak_bytes = 0;  // most resident at once
};

class TeacherPool {
 public:
  // Checks every teacher against the student's vocabulary (`vocab_size` and
  // its tokenizer) and the budget. INVALID_ARGUMENT naming the teacher when
  // one does not fit.
  static absl::StatusOr<std::unique_ptr<TeacherPool>> Open(
      std::vector<TeacherSpec> teachers, int64_t vocab_size,
      const tokenizer::Tokenizer& student_tokenizer, const TeacherPoolOptions& options);

  // Checks `spec` as Open does (vocabulary, budget) without adding it; its
  // parameter bytes.
  absl::StatusOr<int64_t> Check(const TeacherSpec& spec) const;
  // Checks `spec` and gives it the next slot (a live change adds teachers
  // this way; a slot is never reused, so samples holding one keep their
  // teacher). Returns the slot.
  absl::StatusOr<int> Add(TeacherSpec spec);

  // The teacher in `slot`, brought onto the device if it is not there
  // (evicting the least recently used ones until it fits). The pointer is
  // valid until the next Acquire.
  absl::StatusOr<const model::Transformer*> Acquire(int slot);

  int size() const { return static_cast<int>(teachers_.size()); }
  const std::string& name(int slot) const { return teachers_[slot].spec.name; }
  const std::string& path(int slot) const { return teachers_[slot].spec.path; }
  int64_t bytes(int slot) const { return teachers_[slot].bytes; }
  bool resident(int slot) const { return teachers_[slot].model != nullptr; }
  // Resident slots, least recently used first.
  std::vector<int> ResidentSlots() const { return {lru_.begin(), lru_.end()}; }
  const TeacherPoolStats& stats() const { return stats_; }

 private:
  struct Teacher {
    TeacherSpec spec;
    int64_t bytes = 0;  // its parameters in the pool's dtype
    std::unique_ptr<model::Transformer> model;
  };

  TeacherPool(TeacherPoolOptions options, int64_t vocab_size,
              const tokenizer::Tokenizer& student_tokenizer)
      : options_(options), vocab_size_(vocab_size), student_tokenizer_(student_tokenizer) {}
  void Evict(int slot);

  TeacherPoolOptions options_;
  int64_t vocab_size_;
  const tokenizer::Tokenizer& student_tokenizer_;  // outlives the pool (the run's tokenizer)
  std::vector<Teacher> teachers_;
  std::list<int> lru_;  // resident slots, least recently used first
  TeacherPoolStats stats_;
};

}  // namespace loom::algo
