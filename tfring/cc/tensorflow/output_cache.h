// TensorFlow's face of the process-wide BlockCache (common/block_cache.h): an Allocator whose tensors are ordinary
// TF tensors (TF calls DeallocateRaw when the last reference goes), for large CPU collective outputs.
#pragma once
#include <string>

#include "../common/block_cache.h"
#include "tensorflow/core/framework/allocator.h"

namespace tfring {
namespace tf {

class OutputCache : public ::tensorflow::Allocator {
 public:
  static OutputCache* Get() {
    static OutputCache* cache = new OutputCache();  // never destroyed, as the BlockCache
    return cache;
  }
  static constexpr size_t kMinBytes = BlockCache::kMinBytes;
  size_t capacity() const { return BlockCache::Get()->capacity(); }

  std::string Name() override { return "tfring_output_cache"; }
  void* AllocateRaw(size_t alignment, size_t num_bytes) override {
    return BlockCache::Get()->Allocate(alignment, num_bytes);
  }
  void DeallocateRaw(void* ptr) override { BlockCache::Get()->Release(ptr); }
};

}  // namespace tf
}  // namespace tfring
