#include "controller.h"

#include <set>

#include "logging.h"
#include "timeline.h"

namespace tfring {
namespace {
constexpr uint64_t kNotShutdown = 1, kNoUncached = 2, kNotJoined = 4, kNoMonitorRound = 8;
}  // namespace

Controller::Controller(Transport& transport, TensorQueue& queue, ControllerOptions options)
    : transport_(transport), queue_(queue), cache_(options.cache_capacity), options_(std::move(options)) {
  if (transport_.rank() == 0)
    coordinator_.reset(new Coordinator(transport_.size(), options_.stall, options_.timeline, options_.set));
}

Status Controller::ComputeResponseList(bool shutdown, ResponseList* out) {
  out->responses.clear();
  out->stall_report.clear();
  out->tuned_fusion_threshold = -1;
  out->tuned_cycle_time_ms = -1;
  out->tuned_hierarchical = -1;
  Cycle c;
  c.stall_on = options_.stall.clock && options_.stall.warn_seconds + options_.stall.shutdown_seconds > 0;
  c.now = c.stall_on ? options_.stall.clock() : 0;
  c.uncached = std::move(resend_);
  resend_.clear();
  DemoteStaleHits(&c);
  CollectRequests(&c);
  EncodeBits(shutdown, &c);
  TFR_RETURN_IF_ERROR(transport_.AllreduceBitAnd(&c.bits));
  const bool any_joined = !(c.bits[0] & kNotJoined);
  out->shutdown = !(c.bits[0] & kNotShutdown);
  // Right after the AND (every rank leaves it together: the round reads its clock offsets there); the last
  // cycle also flushes the other ranks' timeline events and the metrics.
  if (options_.monitor && (!(c.bits[0] & kNoMonitorRound) || out->shutdown))
    TFR_RETURN_IF_ERROR(options_.monitor->Round(transport_, out->shutdown));
  // A shutdown also goes through the coordinator, which names the rank that asked for it.
  bool need_full = !(c.bits[0] & kNoUncached) || any_joined || out->shutdown;
  need_full |= DropInvalidated(&c);
  TakeReadyHits(any_joined, &c, out);
  if (!need_full) return Status::OK();
  ResponseList decided;
  last_full_round_ = c.now;
  TFR_RETURN_IF_ERROR(FullRound(std::move(c.uncached), shutdown, &decided));
  MergeDecided(std::move(decided), out);
  return Status::OK();
}

void Controller::DemoteStaleHits(Cycle* c) {
  if (!c->stall_on) return;
  // A cache hit waiting long means some rank is missing: drop the entry everywhere and negotiate the name
  // in full, where the coordinator's stall inspector sees it.
  double limit = 1.0;
  for (double t : {options_.stall.warn_seconds, options_.stall.shutdown_seconds})
    if (t > 0 && t < limit) limit = t;
  for (auto& kv : cached_pending_)
    if (c->now - kv.second.second >= limit) c->invalid.insert(kv.first);
}

void Controller::CollectRequests(Cycle* c) {
  for (Request& r : queue_.PopNewRequests()) {
    r.rank = transport_.rank();
    if (r.op == OpType::JOIN) joined_ = true;
    uint32_t pos = 0;
    auto found = cache_.enabled() ? cache_.Find(r, &pos) : ResponseCache::Lookup::MISS;
    if (found == ResponseCache::Lookup::HIT && !cached_pending_.count(pos)) {
      cached_pending_[pos] = {r, c->now};
      continue;
    }
    if (found == ResponseCache::Lookup::INVALID) c->invalid.insert(pos);
    c->uncached.push_back(std::move(r));
  }
}

void Controller::EncodeBits(bool shutdown, Cycle* c) {
  // Layout: [flags][ready bits][valid bits]. AND semantics, so "any rank wants X" is sent as a cleared bit.
  c->nbits = cache_.num_positions();
  c->words = (c->nbits + 63) / 64;
  std::vector<uint64_t>& bits = c->bits;
  bits.assign(1 + 2 * c->words, 0);
  bits[0] = ~uint64_t(0);
  if (shutdown) bits[0] &= ~kNotShutdown;
  // Rank 0 also asks for a round while its coordinator holds waiting names, so stalls get inspected.
  const bool inspect = c->stall_on && coordinator_ && coordinator_->pending() > 0 && c->now - last_full_round_ >= 0.5;
  if (!c->uncached.empty() || inspect || has_proposal_) bits[0] &= ~kNoUncached;
  if (joined_) bits[0] &= ~kNotJoined;
  if (options_.monitor && options_.monitor->WantRound()) bits[0] &= ~kNoMonitorRound;
  for (const auto& kv : cached_pending_)
    if (!c->invalid.count(kv.first)) bits[1 + kv.first / 64] |= uint64_t(1) << (kv.first % 64);
  for (size_t w = 0; w < c->words; ++w) bits[1 + c->words + w] = ~uint64_t(0);
  for (uint32_t pos : c->invalid) bits[1 + c->words + pos / 64] &= ~(uint64_t(1) << (pos % 64));
}

bool Controller::DropInvalidated(Cycle* c) {
  // Parameters changed somewhere: every rank drops the entry and negotiates that name in full.
  bool any = false;
  for (uint32_t pos = 0; pos < c->nbits; ++pos) {
    if (c->bits[1 + c->words + pos / 64] & (uint64_t(1) << (pos % 64))) continue;
    auto it = cached_pending_.find(pos);
    if (it != cached_pending_.end()) {
      c->uncached.push_back(std::move(it->second.first));
      cached_pending_.erase(it);
    }
    cache_.Erase(pos);
    any = true;
  }
  return any;
}

void Controller::TakeReadyHits(bool any_joined, Cycle* c, ResponseList* out) {
  if (any_joined) {
    // Joined ranks hold no entries, so the bit vector cannot express readiness: negotiate everything.
    for (auto& kv : cached_pending_) c->uncached.push_back(std::move(kv.second.first));
    cached_pending_.clear();
    return;
  }
  for (uint32_t pos = 0; pos < c->nbits; ++pos) {
    const uint64_t bit = uint64_t(1) << (pos % 64);
    // An invalidated position was just erased and its requests re-sent in full: never execute it here too.
    if (!(c->bits[1 + pos / 64] & bit) || !(c->bits[1 + c->words + pos / 64] & bit)) continue;
    out->responses.push_back(cache_.Get(pos));
    if (options_.timeline) options_.timeline->NegotiateEnd(out->responses.back().names[0], true);
    cache_.Touch(pos);
    cached_pending_.erase(pos);
  }
}

void Controller::MergeDecided(ResponseList decided, ResponseList* out) {
  out->stall_report = decided.stall_report;
  if (!decided.stall_report.empty()) TFR_LOG(TFR_WARNING, decided.stall_report);
  CacheDecided(decided);
  for (auto& r : decided.responses) {
    if (r.op == OpType::JOIN) joined_ = false;
    if (options_.timeline)
      for (const auto& name : r.names) options_.timeline->NegotiateEnd(name, false);
    out->responses.push_back(std::move(r));
  }
  out->shutdown |= decided.shutdown;
  out->shutdown_rank = decided.shutdown_rank;
  out->tuned_fusion_threshold = decided.tuned_fusion_threshold;
  out->tuned_cycle_time_ms = decided.tuned_cycle_time_ms;
  out->tuned_hierarchical = decided.tuned_hierarchical;
}

Status Controller::FullRound(std::vector<Request> uncached, bool shutdown, ResponseList* decided) {
  ++full_rounds_;
  RequestList mine;
  mine.requests = std::move(uncached);
  mine.shutdown = shutdown;
  std::vector<std::string> all;
  TFR_RETURN_IF_ERROR(transport_.GatherToRoot(Encode(mine), &all));
  std::string bytes;
  if (coordinator_) {
    for (size_t r = 0; r < all.size(); ++r) {
      RequestList l;
      TFR_RETURN_IF_ERROR(Decode(all[r], &l));
      coordinator_->Add(static_cast<int>(r), l);
    }
    ResponseList built = coordinator_->Build();
    if (has_proposal_) {
      built.tuned_fusion_threshold = proposal_.fusion_threshold_bytes;
      built.tuned_cycle_time_ms = proposal_.cycle_time_ms;
      built.tuned_hierarchical = proposal_.hierarchical;
      has_proposal_ = false;
    }
    bytes = Encode(built);
  }
  TFR_RETURN_IF_ERROR(transport_.BroadcastFromRoot(&bytes));
  return Decode(bytes, decided);
}

void Controller::CacheDecided(const ResponseList& decided) {
  if (!cache_.enabled() || !decided.cacheable) return;
  for (const Response& r : decided.responses) {
    if (!ResponseCache::Cacheable(r)) continue;
    const Request* own = queue_.Find(r.names[0]);
    if (!own) continue;  // cannot happen while no rank is joined; every rank skips identically then
    Request mine = *own;
    mine.rank = transport_.rank();
    int64_t evicted = cache_.Put(r, mine);
    auto it = evicted >= 0 ? cached_pending_.find(static_cast<uint32_t>(evicted)) : cached_pending_.end();
    if (it != cached_pending_.end()) {
      resend_.push_back(std::move(it->second.first));
      cached_pending_.erase(it);
    }
  }
}

}  // namespace tfring
