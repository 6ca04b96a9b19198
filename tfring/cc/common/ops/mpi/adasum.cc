// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation"): combine two gradients a and b as
//   (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// so orthogonal gradients add and parallel ones average. Recursive doubling over a power-of-two set: at distance
// d = 1, 2, 4, ... every rank swaps its partial result with rank ^ d and both combine the pair in the same order
// (lower rank first), so every rank ends with bitwise the same vector. Each tensor of a fused response has its
// own coefficients (layer-wise, as Horovod). Dot products in double precision. Full vectors are exchanged at each
// level (log2(n) x the data, where Horovod's vector-halving sends ~2x): simple, exact, meant for small sets.
#include <cmath>
#include <cstring>
#include <vector>

#include "../../half.h"
#include "../../timeline.h"
#include "../scale.h"
#include "collectives.h"

namespace tfring {
namespace {

double Get(const char* p, int64_t i, DataType t) {
  switch (t) {
    case DataType::FLOAT16:
      return HalfToFloat(reinterpret_cast<const uint16_t*>(p)[i]);
    case DataType::BFLOAT16:
      return Bf16ToFloat(reinterpret_cast<const uint16_t*>(p)[i]);
    case DataType::FLOAT32:
      return reinterpret_cast<const float*>(p)[i];
    default:
      return reinterpret_cast<const double*>(p)[i];
  }
}

void Set(char* p, int64_t i, DataType t, double v) {
  switch (t) {
    case DataType::FLOAT16:
      reinterpret_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DataType::BFLOAT16:
      reinterpret_cast<uint16_t*>(p)[i] = FloatToBf16(static_cast<float>(v));
      break;
    case DataType::FLOAT32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    default:
      reinterpret_cast<double*>(p)[i] = v;
      break;
  }
}

// lo := combine(lo, hi) for `count` elements of one tensor.
void Combine(char* lo, const char* hi, int64_t count, DataType t) {
  double dot = 0, nlo = 0, nhi = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double a = Get(lo, i, t), b = Get(hi, i, t);
    dot += a * b, nlo += a * a, nhi += b * b;
  }
  const double ca = nlo > 0 ? 1.0 - dot / (2 * nlo) : 1.0;
  const double cb = nhi > 0 ? 1.0 - dot / (2 * nhi) : 1.0;
  for (int64_t i = 0; i < count; ++i) Set(lo, i, t, ca * Get(lo, i, t) + cb * Get(hi, i, t));
}

}  // namespace

Status MpiAdasum(MpiContext& ctx, const Response& r, const Entries& entries) {
  const int64_t esize = DataTypeSize(r.dtype);
  int64_t total = 0;
  for (int64_t s : r.sizes) total += s;
  std::vector<char> mine(total * esize), theirs(total * esize);
  int64_t off = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    std::memcpy(mine.data() + off, entries[i]->input->data(), r.sizes[i] * esize);
    off += r.sizes[i] * esize;
  }
  ScaleBuffer(mine.data(), total, r.dtype, r.prescale);
  {
    TimelineActivity mpi(ctx.timeline, r.names, "MPI_ADASUM");
    for (int d = 1; d < ctx.size; d <<= 1) {
      const int partner = ctx.rank ^ d;
      for (int64_t done = 0; done < total * esize; done += ctx.max_count) {  // int counts: chunk the bytes
        const int n = static_cast<int>(std::min<int64_t>(ctx.max_count, total * esize - done));
        TFR_CHECK_MPI(MPI_Sendrecv(mine.data() + done, n, MPI_BYTE, partner, d, theirs.data() + done, n, MPI_BYTE,
                                   partner, d, ctx.comm, MPI_STATUS_IGNORE));
      }
      // The lower rank's vector comes first on both sides: the same arithmetic, the same bits.
      if (ctx.rank > partner) std::swap(mine, theirs);
      int64_t pos = 0;
      for (int64_t s : r.sizes) {
        Combine(mine.data() + pos * esize, theirs.data() + pos * esize, s, r.dtype);
        pos += s;
      }
    }
  }
  ScaleBuffer(mine.data(), total, r.dtype, r.postscale);
  off = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    std::memcpy(entries[i]->output->data(), mine.data() + off, r.sizes[i] * esize);
    off += r.sizes[i] * esize;
  }
  return Status::OK();
}

}  // namespace tfring
