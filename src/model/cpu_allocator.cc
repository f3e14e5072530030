#include "loom/model/cpu_allocator.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

namespace loom::model {
namespace {

// Below this malloc's own heap reuses blocks without faulting them in again.
constexpr size_t kMinCachedBytes = size_t{1} << 20;
// Large requests are rounded up to whole 2 MiB so near sizes share blocks.
constexpr size_t kGranule = size_t{2} << 20;

// LibTorch 2.3 made allocate() non-const and added copy_data().
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define LOOM_TORCH_2_3 1
#define LOOM_ALLOCATE_CONST
#else
#define LOOM_TORCH_2_3 0
#define LOOM_ALLOCATE_CONST const
#endif

// Idle large blocks by size and by age, and the large blocks handed out.
class BlockCache {
 public:
  // A block of `bytes` (a multiple of kGranule): an idle one it fits within
  // an eighth, or fresh memory. Throws c10::Error when out of memory.
  void* Take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto fit = by_size_.lower_bound(bytes);
      if (fit != by_size_.end() && fit->first <= bytes + bytes / 8) {
        auto idle = by_age_.find(fit->second);
        const Idle block = idle->second;
        by_age_.erase(idle);
        by_size_.erase(fit);
        in_use_[block.data] = block.bytes;
        ++stats_.hits;
        stats_.idle_bytes -= static_cast<int64_t>(block.bytes);
        stats_.in_use_bytes += static_cast<int64_t>(block.bytes);
        return block.data;
      }
      ++stats_.misses;
    }
    void* data = c10::alloc_cpu(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    in_use_[data] = bytes;
    stats_.in_use_bytes += static_cast<int64_t>(bytes);
    return data;
  }

  // Any pointer the allocator handed out: a large block turns idle, a small
  // one goes back to malloc.
  void Give(void* data) {
    std::vector<void*> freed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto used = in_use_.find(data);
      if (used == in_use_.end()) {
        freed.push_back(data);
      } else {
        const size_t bytes = used->second;
        in_use_.erase(used);
        stats_.in_use_bytes -= static_cast<int64_t>(bytes);
        const uint64_t age = next_age_++;
        by_age_.emplace(age, Idle{data, bytes});
        by_size_.emplace(bytes, age);
        stats_.idle_bytes += static_cast<int64_t>(bytes);
        EvictOverCap(freed);
      }
    }
    for (void* block : freed) c10::free_cpu(block);
  }

  void SetCap(int64_t cap) {
    std::vector<void*> freed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cap_ = static_cast<size_t>(std::max<int64_t>(cap, 0));
      EvictOverCap(freed);
    }
    for (void* block : freed) c10::free_cpu(block);
  }

  CpuCacheStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  struct Idle {
    void* data;
    size_t bytes;
  };

  // Drops the least recently freed idle blocks until the rest fit the cap;
  // the caller frees them outside the lock.
  void EvictOverCap(std::vector<void*>& freed) {
    while (static_cast<size_t>(stats_.idle_bytes) > cap_) {
      auto oldest = by_age_.begin();
      auto same_size = by_size_.equal_range(oldest->second.bytes).first;
      while (same_size->second != oldest->first) ++same_size;
      by_size_.erase(same_size);
      stats_.idle_bytes -= static_cast<int64_t>(oldest->second.bytes);
      ++stats_.evictions;
      freed.push_back(oldest->second.data);
      by_age_.erase(oldest);
    }
  }

  std::mutex mu_;
  size_t cap_ = 0;                            // guarded by mu_: idle bytes kept at most
  uint64_t next_age_ = 0;                     // guarded by mu_
  std::map<uint64_t, Idle> by_age_;           // guarded by mu_: oldest first
  std::multimap<size_t, uint64_t> by_size_;   // guarded by mu_: bytes -> age
  std::unordered_map<void*, size_t> in_use_;  // guarded by mu_: large blocks out
  CpuCacheStats stats_;                       // guarded by mu_
};

BlockCache& Blocks() {
  // Never destroyed: tensors freed during static destruction still find it.
  static auto* blocks = new BlockCache();
  return *blocks;
}

void Release(void* data) { Blocks().Give(data); }

class CachingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) LOOM_ALLOCATE_CONST override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (bytes < kMinCachedBytes) {
      void* data = c10::alloc_cpu(bytes);
      return {data, data, &c10::free_cpu, cpu};
    }
    void* data = Blocks().Take((bytes + kGranule - 1) / kGranule * kGranule);
    return {data, data, &Release, cpu};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Release; }

#if LOOM_TORCH_2_3
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
#endif
};

}  // namespace

void UseCachingCpuAllocator(int64_t idle_cap_bytes) {
  static std::once_flag installed;
  Blocks().SetCap(idle_cap_bytes);
  std::call_once(installed, [] {
    static auto* allocator = new CachingCpuAllocator();
    c10::SetCPUAllocator(allocator);
  });
}

CpuCacheStats CachingCpuAllocatorStats() { return Blocks().Stats(); }

}  // namespace loom::model
