#include "message.h"

#include "codec.h"

namespace tfring {
namespace {

Status Corrupt(const char* what) { return Status::Unknown(std::string("tfring: corrupt ") + what + " message"); }

// Each message's fields in wire order, one list for the Writer and the Reader (R: const when encoding), so the two
// cannot drift apart. The lists' flags and entry counts are written around these.
template <typename IO, typename R>
bool RequestFields(IO& io, R& r) {
  return io.Field(r.rank) && io.Field(r.name) && io.Field(r.op) && io.Field(r.dtype) && io.Field(r.reduce_op) &&
         io.Field(r.root_rank) && io.Field(r.prescale) && io.Field(r.postscale) && io.Field(r.shape) &&
         io.Field(r.splits) && io.Field(r.device);
}

template <typename IO, typename R>
bool ResponseFields(IO& io, R& r) {
  return io.Field(r.kind) && io.Field(r.op) && io.Field(r.names) && io.Field(r.dtype) && io.Field(r.reduce_op) &&
         io.Field(r.root_rank) && io.Field(r.prescale) && io.Field(r.postscale) && io.Field(r.sizes) &&
         io.Field(r.shape) && io.Field(r.joined) && io.Field(r.last_joined_rank) && io.Field(r.devices) &&
         io.Field(r.error) && io.Field(r.error_code);
}

template <typename IO, typename L>
bool ResponseListFields(IO& io, L& l) {
  return io.Field(l.stall_report) && io.Field(l.shutdown_rank) && io.Field(l.tuned_fusion_threshold) &&
         io.Field(l.tuned_cycle_time_ms) && io.Field(l.tuned_hierarchical);
}

}  // namespace

std::string Encode(const RequestList& list) {
  Writer w;
  w.Put<uint8_t>(list.shutdown);
  w.Put<uint32_t>(list.requests.size());
  for (const auto& r : list.requests) RequestFields(w, r);
  return w.Take();
}

Status Decode(const std::string& bytes, RequestList* list) {
  Reader rd(bytes);
  uint8_t shutdown;
  uint32_t n;
  if (!rd.Get(&shutdown) || !rd.Get(&n)) return Corrupt("request");
  list->shutdown = shutdown;
  list->requests.resize(n);
  for (auto& r : list->requests)
    if (!RequestFields(rd, r)) return Corrupt("request");
  return rd.Done() ? Status::OK() : Corrupt("request");
}

std::string Encode(const ResponseList& list) {
  Writer w;
  w.Put<uint8_t>(list.shutdown);
  w.Put<uint8_t>(list.cacheable);
  ResponseListFields(w, list);
  w.Put<uint32_t>(list.responses.size());
  for (const auto& r : list.responses) ResponseFields(w, r);
  return w.Take();
}

Status Decode(const std::string& bytes, ResponseList* list) {
  Reader rd(bytes);
  uint8_t shutdown, cacheable;
  uint32_t n;
  if (!rd.Get(&shutdown) || !rd.Get(&cacheable) || !ResponseListFields(rd, *list) || !rd.Get(&n))
    return Corrupt("response");
  list->shutdown = shutdown;
  list->cacheable = cacheable;
  list->responses.resize(n);
  for (auto& r : list->responses)
    if (!ResponseFields(rd, r)) return Corrupt("response");
  return rd.Done() ? Status::OK() : Corrupt("response");
}

bool SameParameters(const Request& a, const Request& b) {
  return a.name == b.name && a.op == b.op && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.root_rank == b.root_rank && a.prescale == b.prescale && a.postscale == b.postscale && a.shape == b.shape &&
         a.splits == b.splits && a.device == b.device;
}

}  // namespace tfring
