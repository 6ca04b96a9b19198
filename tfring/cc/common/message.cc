#include "message.h"

#include "codec.h"

namespace tfring {
namespace {

Status Corrupt(const char* what) { return Status::Unknown(std::string("tfring: corrupt ") + what + " message"); }

}  // namespace

std::string Encode(const RequestList& list) {
  Writer w;
  w.Put<uint8_t>(list.shutdown);
  w.Put<uint32_t>(list.requests.size());
  for (const auto& r : list.requests) {
    w.Put(r.rank);
    w.PutString(r.name);
    w.Put(r.op);
    w.Put(r.dtype);
    w.Put(r.reduce_op);
    w.Put(r.root_rank);
    w.Put(r.prescale);
    w.Put(r.postscale);
    w.PutInts(r.shape);
    w.PutInts(r.splits);
    w.Put(r.device);
  }
  return w.Take();
}

Status Decode(const std::string& bytes, RequestList* list) {
  Reader rd(bytes);
  uint8_t shutdown;
  uint32_t n;
  if (!rd.Get(&shutdown) || !rd.Get(&n)) return Corrupt("request");
  list->shutdown = shutdown;
  list->requests.resize(n);
  for (auto& r : list->requests) {
    if (!rd.Get(&r.rank) || !rd.GetString(&r.name) || !rd.Get(&r.op) || !rd.Get(&r.dtype) || !rd.Get(&r.reduce_op) ||
        !rd.Get(&r.root_rank) || !rd.Get(&r.prescale) || !rd.Get(&r.postscale) || !rd.GetInts(&r.shape) ||
        !rd.GetInts(&r.splits) || !rd.Get(&r.device))
      return Corrupt("request");
  }
  return rd.Done() ? Status::OK() : Corrupt("request");
}

std::string Encode(const ResponseList& list) {
  Writer w;
  w.Put<uint8_t>(list.shutdown);
  w.Put<uint8_t>(list.cacheable);
  w.PutString(list.stall_report);
  w.Put(list.shutdown_rank);
  w.Put(list.tuned_fusion_threshold);
  w.Put(list.tuned_cycle_time_ms);
  w.Put(list.tuned_hierarchical);
  w.Put<uint32_t>(list.responses.size());
  for (const auto& r : list.responses) {
    w.Put(r.kind);
    w.Put(r.op);
    w.Put<uint32_t>(r.names.size());
    for (const auto& n : r.names) w.PutString(n);
    w.Put(r.dtype);
    w.Put(r.reduce_op);
    w.Put(r.root_rank);
    w.Put(r.prescale);
    w.Put(r.postscale);
    w.PutInts(r.sizes);
    w.PutInts(r.shape);
    w.Put(r.joined);
    w.Put(r.last_joined_rank);
    w.PutInts(r.devices);
    w.PutString(r.error);
    w.Put(r.error_code);
  }
  return w.Take();
}

Status Decode(const std::string& bytes, ResponseList* list) {
  Reader rd(bytes);
  uint8_t shutdown, cacheable;
  uint32_t n;
  if (!rd.Get(&shutdown) || !rd.Get(&cacheable) || !rd.GetString(&list->stall_report) ||
      !rd.Get(&list->shutdown_rank) || !rd.Get(&list->tuned_fusion_threshold) || !rd.Get(&list->tuned_cycle_time_ms) ||
      !rd.Get(&list->tuned_hierarchical) || !rd.Get(&n))
    return Corrupt("response");
  list->shutdown = shutdown;
  list->cacheable = cacheable;
  list->responses.resize(n);
  for (auto& r : list->responses) {
    uint32_t nn;
    if (!rd.Get(&r.kind) || !rd.Get(&r.op) || !rd.Get(&nn)) return Corrupt("response");
    r.names.resize(nn);
    for (auto& s : r.names)
      if (!rd.GetString(&s)) return Corrupt("response");
    if (!rd.Get(&r.dtype) || !rd.Get(&r.reduce_op) || !rd.Get(&r.root_rank) || !rd.Get(&r.prescale) ||
        !rd.Get(&r.postscale) || !rd.GetInts(&r.sizes) || !rd.GetInts(&r.shape) || !rd.Get(&r.joined) ||
        !rd.Get(&r.last_joined_rank) || !rd.GetInts(&r.devices) || !rd.GetString(&r.error) || !rd.Get(&r.error_code))
      return Corrupt("response");
  }
  return rd.Done() ? Status::OK() : Corrupt("response");
}

bool SameParameters(const Request& a, const Request& b) {
  return a.name == b.name && a.op == b.op && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.root_rank == b.root_rank && a.prescale == b.prescale && a.postscale == b.postscale && a.shape == b.shape &&
         a.splits == b.splits && a.device == b.device;
}

}  // namespace tfring
