// The caching CPU allocator: reuse, the idle cap, no faulting in again,
// concurrent use, and training numerics unchanged by reused memory. Its own
// binary: installing it changes the allocator of the whole process.

#include "loom/model/cpu_allocator.h"

#include <sys/resource.h>

#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include "loom/model/batch.h"
#include "test_models.h"

namespace loom::model {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

at::Tensor Floats(int64_t bytes) { return at::empty({bytes / 4}, at::kFloat); }

int64_t MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

TEST(CpuAllocatorTest, FreedLargeBlocksAreHandedOutAgain) {
  UseCachingCpuAllocator(256 * kMiB);
  void* first = nullptr;
  {
    at::Tensor t = Floats(18 * kMiB);
    first = t.data_ptr();
  }
  const CpuCacheStats before = CachingCpuAllocatorStats();
  {
    at::Tensor same = Floats(18 * kMiB);
    EXPECT_EQ(same.data_ptr(), first);
  }
  {
    at::Tensor near = Floats(15 * kMiB + 1);  // rounds to 16 MiB: the idle 18 is within an eighth
    EXPECT_EQ(near.data_ptr(), first);
  }
  {
    at::Tensor smaller = Floats(12 * kMiB);  // 18 would waste a third
    EXPECT_NE(smaller.data_ptr(), first);
  }
  {
    at::Tensor larger = Floats(20 * kMiB);  // 18 is too small
    EXPECT_NE(larger.data_ptr(), first);
  }
  { at::Tensor small = Floats(64 * 1024); }  // malloc's, never counted
  const CpuCacheStats after = CachingCpuAllocatorStats();
  EXPECT_EQ(after.hits - before.hits, 2);
  EXPECT_EQ(after.misses - before.misses, 2);
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  UseCachingCpuAllocator(0);
}

TEST(CpuAllocatorTest, IdleBytesStayUnderTheCapOldestGoFirst) {
  UseCachingCpuAllocator(0);
  EXPECT_EQ(CachingCpuAllocatorStats().idle_bytes, 0);
  UseCachingCpuAllocator(40 * kMiB);
  const CpuCacheStats before = CachingCpuAllocatorStats();
  std::vector<at::Tensor> held;
  for (int i = 0; i < 4; ++i) held.push_back(Floats(16 * kMiB));
  std::vector<void*> data;
  for (const at::Tensor& t : held) data.push_back(t.data_ptr());
  held.clear();  // freed in order: the first two are evicted when the third and fourth go idle
  const CpuCacheStats after = CachingCpuAllocatorStats();
  EXPECT_EQ(after.idle_bytes, 32 * kMiB);
  EXPECT_EQ(after.evictions - before.evictions, 2);
  std::vector<void*> again;
  for (int i = 0; i < 2; ++i) held.push_back(Floats(16 * kMiB));
  for (const at::Tensor& t : held) again.push_back(t.data_ptr());
  EXPECT_TRUE((again[0] == data[2] && again[1] == data[3]) ||
              (again[0] == data[3] && again[1] == data[2]));
  held.clear();
  UseCachingCpuAllocator(0);
  EXPECT_EQ(CachingCpuAllocatorStats().idle_bytes, 0);
}

TEST(CpuAllocatorTest, ReusedBlocksAreNotFaultedInAgain) {
  UseCachingCpuAllocator(256 * kMiB);
  const int64_t pages = 64 * kMiB / 4096;
  { Floats(64 * kMiB).fill_(1); }  // warm: faulted in once
  const int64_t start = MinorFaults();
  for (int i = 0; i < 10; ++i) Floats(64 * kMiB).fill_(static_cast<double>(i));
  const int64_t cached = MinorFaults() - start;
  // Without reuse each round faults in every page again (16384 of them).
  EXPECT_LT(cached, pages / 4) << cached << " minor faults in 10 rounds";
  UseCachingCpuAllocator(0);
}

TEST(CpuAllocatorTest, ThreadsNeverShareABlock) {
  UseCachingCpuAllocator(64 * kMiB);
  std::vector<std::thread> threads;
  std::vector<int> corrupted(4, 0);
  for (int id = 0; id < 4; ++id) {
    threads.emplace_back([id, &corrupted] {
      for (int i = 0; i < 200; ++i) {
        const int64_t mib = 1 + (id * 7 + i * 3) % 6;
        at::Tensor t = at::empty({mib * kMiB / 4}, at::kInt);
        const int value = id * 1000 + i;
        t.fill_(value);
        std::this_thread::yield();
        corrupted[id] += (t != value).sum().item<int64_t>() > 0;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int id = 0; id < 4; ++id) EXPECT_EQ(corrupted[id], 0) << "thread " << id;
  EXPECT_EQ(CachingCpuAllocatorStats().in_use_bytes, 0);
  UseCachingCpuAllocator(0);
}

TEST(CpuAllocatorTest, RawAllocationsComeBack) {
  UseCachingCpuAllocator(64 * kMiB);
  c10::Allocator* allocator = c10::GetCPUAllocator();
  const CpuCacheStats before = CachingCpuAllocatorStats();
  void* large = allocator->raw_allocate(8 * kMiB);
  void* small = allocator->raw_allocate(100);
  EXPECT_EQ(CachingCpuAllocatorStats().in_use_bytes - before.in_use_bytes, 8 * kMiB);
  allocator->raw_deallocate(large);
  allocator->raw_deallocate(small);
  EXPECT_EQ(CachingCpuAllocatorStats().in_use_bytes, before.in_use_bytes);
  UseCachingCpuAllocator(0);
}

// Gradients of a teacher-forced loss over sequences long enough that the
// attention scores are large blocks.
std::vector<at::Tensor> Gradients(Transformer& model) {
  std::vector<std::vector<int64_t>> sequences;
  for (int64_t b = 0; b < 4; ++b) {
    std::vector<int64_t> tokens;
    for (int64_t t = 0; t < 300 + 20 * b; ++t) tokens.push_back((b * 31 + t * 17) % 97);
    sequences.push_back(tokens);
  }
  for (at::Tensor& p : model.Parameters()) p.mutable_grad() = at::Tensor();
  auto scored = model.Score(TeacherForcingBatch(sequences));
  EXPECT_TRUE(scored.ok());
  (-scored->logprobs.sum()).backward();
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : model.Parameters()) grads.push_back(p.grad().clone());
  return grads;
}

TEST(CpuAllocatorTest, ReusedMemoryLeavesTrainingNumericsUnchanged) {
  auto model = testing::TestModel(testing::TestConfig("llama"), 7);
  model->SetRequiresGrad(true);
  UseCachingCpuAllocator(0);
  const std::vector<at::Tensor> fresh = Gradients(*model);
  UseCachingCpuAllocator(1024 * kMiB);
  Gradients(*model);  // leaves its blocks, with their contents, idle
  const int64_t hits = CachingCpuAllocatorStats().hits;
  const std::vector<at::Tensor> reused = Gradients(*model);
  EXPECT_GT(CachingCpuAllocatorStats().hits, hits);
  ASSERT_EQ(fresh.size(), reused.size());
  for (size_t i = 0; i < fresh.size(); ++i) EXPECT_TRUE(at::equal(fresh[i], reused[i])) << i;
  UseCachingCpuAllocator(0);
}

}  // namespace
}  // namespace loom::model
