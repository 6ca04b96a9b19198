#include "block_cache.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cstdlib>
#include <vector>

#include "env.h"

namespace tfring {

BlockCache* BlockCache::Get() {
  static BlockCache* cache = [] {
    auto* c = new BlockCache(static_cast<size_t>(Settings::FromEnvironment().output_cache_bytes));
    // fork() (a torch DataLoader's workers) while another thread holds the lock would leave the child's copy
    // locked forever: hold it across the fork, release it on both sides.
    pthread_atfork([] { Get()->mu_.lock(); }, [] { Get()->mu_.unlock(); }, [] { Get()->mu_.unlock(); });
    return c;
  }();
  return cache;
}

namespace {
constexpr size_t kPage = 4096;
constexpr size_t kHugePage = 2 << 20;
size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

void* BlockCache::Allocate(size_t alignment, size_t num_bytes) {
  // Blocks are whole pages (>= 64-byte aligned, what TF and torch require); a cached block serves a request of up to
  // 1/8 less than its size, so shapes that differ slightly still reuse each other's memory.
  const size_t size = RoundUp(num_bytes == 0 ? 1 : num_bytes, kPage);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_size_.lower_bound(size);
    if (it != by_size_.end() && it->first <= size + size / 8) {
      void* block = it->second->second;
      const size_t have = it->first;
      idle_.erase(it->second);
      by_size_.erase(it);
      stats_.idle_bytes -= have;
      stats_.live_bytes += have;
      stats_.hits++;
      live_[block] = have;
      return block;
    }
    stats_.misses++;
  }
  void* block = nullptr;
  if (posix_memalign(&block, alignment < kPage ? kPage : alignment, size) != 0) return nullptr;
  // Transparent huge pages where the kernel offers them on request: the first touch then faults once per 2 MiB.
  if (size >= kHugePage) madvise(block, size, MADV_HUGEPAGE);
  std::lock_guard<std::mutex> lock(mu_);
  live_[block] = size;
  stats_.live_bytes += size;
  return block;
}

void BlockCache::Release(void* ptr) {
  if (ptr == nullptr) return;
  std::vector<void*> evicted;  // freed after the lock: unmapping takes time
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours: never happens, but never free what we did not allocate
    const size_t size = it->second;
    live_.erase(it);
    stats_.live_bytes -= size;
    if (size <= capacity_) {
      EvictLocked(size, &evicted);
      idle_.emplace_back(size, ptr);
      by_size_.emplace(size, std::prev(idle_.end()));
      stats_.idle_bytes += size;
      ptr = nullptr;
    }
  }
  for (void* block : evicted) std::free(block);
  std::free(ptr);
}

void BlockCache::EvictLocked(size_t need, std::vector<void*>* evicted) {
  while (!idle_.empty() && stats_.idle_bytes + need > capacity_) {
    auto [size, block] = idle_.front();
    auto range = by_size_.equal_range(size);
    for (auto it = range.first; it != range.second; ++it)
      if (it->second == idle_.begin()) {
        by_size_.erase(it);
        break;
      }
    idle_.pop_front();
    stats_.idle_bytes -= size;
    stats_.evictions++;
    evicted->push_back(block);
  }
}

BlockCache::Stats BlockCache::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tfring
