// Warm memory for large collective outputs on the CPU.
//
// A TF op must return a new tensor, and TF's default CPU allocator gets large buffers from malloc, which maps
// fresh pages for them (mmap) and unmaps them on free: every large collective output then page-faults on first
// touch, which costs more than the MPI transfer itself here (docs/benchmarks.md). This allocator keeps the blocks
// of freed outputs (up to TFRING_OUTPUT_CACHE_BYTES idle bytes, least recently returned evicted first) and hands
// them out again for outputs of the same size, so a training step's gradients land in memory that is already
// mapped. Tensors it allocates are ordinary TF tensors (TF calls DeallocateRaw when the last reference goes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "tensorflow/core/framework/allocator.h"

namespace tfring {
namespace tf {

class OutputCache : public ::tensorflow::Allocator {
 public:
  // Process-wide instance (never destroyed: TF may free tensors during interpreter shutdown).
  static OutputCache* Get();
  // Outputs smaller than this come from TF's own allocator (malloc's heap keeps small blocks warm already).
  static constexpr size_t kMinBytes = 256 << 10;

  explicit OutputCache(size_t capacity) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }

  std::string Name() override { return "tfring_output_cache"; }
  void* AllocateRaw(size_t alignment, size_t num_bytes) override;
  void DeallocateRaw(void* ptr) override;

  struct Stats {
    int64_t hits = 0, misses = 0, evictions = 0;
    size_t idle_bytes = 0, live_bytes = 0;
  };
  Stats stats();

 private:
  using IdleList = std::list<std::pair<size_t, void*>>;  // (block size, block), oldest first

  void EvictLocked(size_t need);

  const size_t capacity_;
  std::mutex mu_;
  std::unordered_map<void*, size_t> live_;  // block -> its size
  IdleList idle_;                           // LRU order of idle blocks
  std::multimap<size_t, IdleList::iterator> by_size_;
  Stats stats_;
};

}  // namespace tf
}  // namespace tfring
