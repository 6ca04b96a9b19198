// Buffer arithmetic shared by the backends (pure functions, unit-tested without MPI or a GPU).
#pragma once
#include <cstdint>
#include <vector>

#include "../types.h"

namespace tfring {

// Reducescatter's rows per rank: as even as possible, the first dim0 % n ranks get one extra (Horovod's layout).
std::vector<int64_t> EvenRowCounts(int64_t dim0, int n);

// Exclusive prefix sums: where each part starts when the parts are laid end to end.
std::vector<int64_t> Offsets(const std::vector<int64_t>& counts);

// Fusion buffer layout: element offset of each tensor, each start aligned to `align_bytes` so device copies and
// kernels see aligned addresses; `total` covers the gaps too (they are reduced along, never copied out).
struct FusionLayout {
  std::vector<int64_t> offsets;
  int64_t total = 0;
};
FusionLayout PlanFusionLayout(const std::vector<int64_t>& counts, int element_size, int align_bytes);

// Can NCCL reduce this dtype? (It has no 16-bit integers or bool; data movement works for every dtype as bytes.)
bool NcclCanReduce(DataType dtype);

}  // namespace tfring
