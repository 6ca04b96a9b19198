#include "response_cache.h"

namespace tfring {

bool ResponseCache::Cacheable(const Response& r) {
  return r.kind == Response::OK && r.names.size() == 1 && r.joined == 0 && r.op != OpType::JOIN &&
         r.op != OpType::BARRIER && r.op != OpType::PROCESS_SET;
}

ResponseCache::Lookup ResponseCache::Find(const Request& own, uint32_t* position) const {
  auto it = by_name_.find(own.name);
  if (it == by_name_.end()) return Lookup::MISS;
  *position = it->second;
  return SameParameters(slots_[it->second].own, own) ? Lookup::HIT : Lookup::INVALID;
}

int64_t ResponseCache::Put(const Response& response, const Request& own) {
  if (!enabled()) return -1;
  auto it = by_name_.find(own.name);
  if (it != by_name_.end()) {
    Slot& s = slots_[it->second];
    s.response = response;
    s.own = own;
    Touch(it->second);
    return -1;
  }
  int64_t evicted = -1;
  if (static_cast<int64_t>(by_name_.size()) >= capacity_) {
    evicted = lru_.back();
    Erase(static_cast<uint32_t>(evicted));
  }
  uint32_t pos;
  if (!free_.empty()) {
    pos = *free_.begin();  // lowest free position keeps the bit vector short
    free_.erase(free_.begin());
  } else {
    pos = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[pos];
  s.used = true;
  s.response = response;
  s.own = own;
  lru_.push_front(pos);
  s.lru = lru_.begin();
  by_name_[own.name] = pos;
  return evicted;
}

void ResponseCache::Touch(uint32_t position) {
  Slot& s = slots_[position];
  lru_.splice(lru_.begin(), lru_, s.lru);
}

void ResponseCache::Erase(uint32_t position) {
  Slot& s = slots_[position];
  if (!s.used) return;
  by_name_.erase(s.own.name);
  lru_.erase(s.lru);
  s = Slot();
  free_.insert(position);
}

}  // namespace tfring
