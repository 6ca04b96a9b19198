#include "layout.h"

namespace tfring {

std::vector<int64_t> EvenRowCounts(int64_t dim0, int n) {
  std::vector<int64_t> counts(n);
  for (int i = 0; i < n; ++i) counts[i] = dim0 / n + (i < dim0 % n ? 1 : 0);
  return counts;
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> out(counts.size());
  int64_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) out[i] = off, off += counts[i];
  return out;
}

FusionLayout PlanFusionLayout(const std::vector<int64_t>& counts, int element_size, int align_bytes) {
  FusionLayout l;
  // Alignment in elements; an element size that does not divide the alignment packs tightly.
  const int64_t align = element_size > 0 && align_bytes % element_size == 0 ? align_bytes / element_size : 1;
  for (int64_t c : counts) {
    l.total = (l.total + align - 1) / align * align;
    l.offsets.push_back(l.total);
    l.total += c;
  }
  return l;
}

bool NcclCanReduce(DataType dtype) {
  switch (dtype) {
    case DataType::UINT16:
    case DataType::INT16:
    case DataType::BOOL:
      return false;
    default:
      return true;
  }
}

}  // namespace tfring
