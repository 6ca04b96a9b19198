#include "fusion.h"

namespace tfring {
namespace {

bool Fusable(const Response& r) { return r.kind == Response::OK && r.op == OpType::ALLREDUCE; }

bool Compatible(const Response& a, const Response& b) {
  return a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.joined == b.joined &&
         a.devices == b.devices;  // never fuse host with device memory, or different device sets
}

int64_t Bytes(const Response& r) {
  int64_t n = 0;
  for (int64_t s : r.sizes) n += s;
  return n * DataTypeSize(r.dtype);
}

}  // namespace

std::vector<Response> PlanFusion(std::vector<Response> in, int64_t threshold) {
  std::vector<Response> out;
  std::vector<bool> used(in.size(), false);
  for (size_t i = 0; i < in.size(); ++i) {
    if (used[i]) continue;
    used[i] = true;
    Response cur = std::move(in[i]);
    if (Fusable(cur) && threshold > 0) {
      int64_t bytes = Bytes(cur);
      // Look ahead: responses are independent, so a later compatible one may join this buffer.
      for (size_t j = i + 1; j < in.size() && bytes < threshold; ++j) {
        if (used[j] || !Fusable(in[j]) || !Compatible(cur, in[j])) continue;
        int64_t b = Bytes(in[j]);
        if (bytes + b > threshold) continue;
        bytes += b;
        used[j] = true;
        cur.names.insert(cur.names.end(), in[j].names.begin(), in[j].names.end());
        cur.sizes.insert(cur.sizes.end(), in[j].sizes.begin(), in[j].sizes.end());
      }
    }
    out.push_back(std::move(cur));
  }
  return out;
}

}  // namespace tfring
