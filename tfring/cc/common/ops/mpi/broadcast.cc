#include <climits>
#include <cstring>

#include "collectives.h"

namespace tfring {

Status MpiBroadcast(MpiContext& ctx, const Response& r, const Entries& entries) {
  TensorEntry* e = entries[0];
  char* buf = static_cast<char*>(e->output->data());
  const int64_t bytes = e->output->size_bytes();
  if (ctx.rank == r.root_rank && e->input->data() != buf) std::memcpy(buf, e->input->data(), bytes);
  const int64_t chunk = ctx.max_count;
  for (int64_t off = 0; off < bytes; off += chunk) {
    const int n = static_cast<int>(std::min(chunk, bytes - off));
    TFR_CHECK_MPI(MPI_Bcast(buf + off, n, MPI_BYTE, r.root_rank, ctx.comm));
  }
  return Status::OK();
}

Status MpiBarrier(MpiContext& ctx, const Response&, const Entries&) {
  TFR_CHECK_MPI(MPI_Barrier(ctx.comm));
  return Status::OK();
}

}  // namespace tfring
