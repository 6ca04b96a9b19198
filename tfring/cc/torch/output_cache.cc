#include "output_cache.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/CPUAllocator.h>

#include <cstring>
#include <new>

#include "../common/block_cache.h"

namespace tfring {
namespace torch_binding {
namespace {

void Release(void* ptr) { BlockCache::Get()->Release(ptr); }

// c10::Allocator's virtuals changed in torch 2.3 (allocate lost its const, copy_data became pure virtual): both
// forms of allocate are defined without `override` and copy_data uses memcpy, so torch 2.1 and later headers build.
class CachedCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) { return Allocate(n); }
  c10::DataPtr allocate(size_t n) const { return Allocate(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

 private:
  static c10::DataPtr Allocate(size_t n) {
    if (n < BlockCache::kMinBytes) return c10::GetCPUAllocator()->allocate(n);  // a resize to something small
    void* p = BlockCache::Get()->Allocate(64, n);
    if (p == nullptr) throw std::bad_alloc();
    return {p, p, &Release, c10::Device(c10::DeviceType::CPU)};
  }
};

}  // namespace

at::Tensor EmptyOutput(at::IntArrayRef shape, const at::TensorOptions& options) {
  static CachedCpuAllocator* allocator = new CachedCpuAllocator();  // never destroyed: storages point to it
  const auto dtype = c10::typeMetaToScalarType(options.dtype());
  const int64_t bytes = c10::multiply_integers(shape) * static_cast<int64_t>(c10::elementSize(dtype));
  if (!options.device().is_cpu() || options.pinned_memory() || BlockCache::Get()->capacity() == 0 ||
      bytes < static_cast<int64_t>(BlockCache::kMinBytes))
    return at::empty(shape, options);
  return at::detail::empty_generic(shape, allocator, c10::DispatchKeySet(c10::DispatchKey::CPU), dtype, c10::nullopt);
}

}  // namespace torch_binding
}  // namespace tfring
