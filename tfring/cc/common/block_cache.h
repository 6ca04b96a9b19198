// Warm memory for large collective outputs on the CPU, shared by the framework adapters.
//
// A framework op returns a new tensor, and the frameworks' CPU allocators get large buffers from malloc, which maps
// fresh pages for them (mmap) and unmaps them on free: every large collective output then page-faults on first
// touch, which costs more than the MPI transfer itself here (docs/benchmarks.md). The cache keeps the blocks of
// freed outputs (up to TFRING_OUTPUT_CACHE_BYTES idle bytes, least recently returned evicted first) and hands them
// out again for outputs of about the same size, so a training step's outputs land in memory already mapped. One
// process-wide instance serves TensorFlow (an Allocator) and torch (a c10::Allocator) alike.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tfring {

class BlockCache {
 public:
  // Process-wide instance (never destroyed: frameworks may free tensors during interpreter shutdown).
  static BlockCache* Get();
  // Outputs smaller than this come from the framework's own allocator (malloc's heap keeps small blocks warm).
  static constexpr size_t kMinBytes = 256 << 10;

  explicit BlockCache(size_t capacity) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }
  // Whole pages, aligned to max(alignment, a page); nullptr when out of memory.
  void* Allocate(size_t alignment, size_t num_bytes);
  void Release(void* ptr);  // a block from Allocate (anything else is ignored)

  struct Stats {
    int64_t hits = 0, misses = 0, evictions = 0;
    size_t idle_bytes = 0, live_bytes = 0;
  };
  Stats stats();

 private:
  using IdleList = std::list<std::pair<size_t, void*>>;  // (block size, block), oldest first

  void EvictLocked(size_t need, std::vector<void*>* evicted);  // oldest idle blocks until `need` fits

  const size_t capacity_;
  std::mutex mu_;
  std::unordered_map<void*, size_t> live_;  // block -> its size
  IdleList idle_;                           // LRU order of idle blocks
  std::multimap<size_t, IdleList::iterator> by_size_;
  Stats stats_;
};

}  // namespace tfring
