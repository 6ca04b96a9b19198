// torch's face of the process-wide BlockCache (common/block_cache.h): large CPU collective outputs (the ones the
// core allocates once shapes are negotiated, and the Python side's out-of-place outputs) come from warm blocks
// instead of malloc's fresh, page-faulting mappings. Their storage stays resizable: torch reallocates through the
// same allocator, which hands small requests to torch's own CPU allocator.
#pragma once
#include <ATen/ATen.h>

namespace tfring {
namespace torch_binding {

// An uninitialized contiguous tensor of `shape` with `options` (dtype, device): from the cache for a CPU tensor of
// at least BlockCache::kMinBytes while TFRING_OUTPUT_CACHE_BYTES > 0, else at::empty.
at::Tensor EmptyOutput(at::IntArrayRef shape, const at::TensorOptions& options);

}  // namespace torch_binding
}  // namespace tfring
