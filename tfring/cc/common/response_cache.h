// Responses of recently executed collectives, each at a bit position. Steady-state steps repeat the same
// tensors, so instead of a coordinator round each rank sets the bits it has ready and one bitwise-AND
// allreduce tells every rank which cached responses to execute. Every rank applies the same Put/Erase/
// Touch sequence, so positions agree on all ranks without extra messages.
#pragma once
#include <cstdint>
#include <list>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "message.h"

namespace tfring {

class ResponseCache {
 public:
  enum class Lookup { MISS, HIT, INVALID };

  explicit ResponseCache(int64_t capacity) : capacity_(capacity) {}
  bool enabled() const { return capacity_ > 0; }
  static bool Cacheable(const Response& r);

  // HIT: same name and parameters as cached; INVALID: same name, different parameters.
  Lookup Find(const Request& own, uint32_t* position) const;
  // Inserts (or refreshes) and returns the position evicted to make room, or -1.
  int64_t Put(const Response& response, const Request& own);
  const Response& Get(uint32_t position) const { return slots_[position].response; }
  void Touch(uint32_t position);
  void Erase(uint32_t position);
  uint32_t num_positions() const { return static_cast<uint32_t>(slots_.size()); }
  size_t size() const { return by_name_.size(); }

 private:
  struct Slot {
    bool used = false;
    Response response;
    Request own;
    std::list<uint32_t>::iterator lru;
  };
  int64_t capacity_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, uint32_t> by_name_;
  std::list<uint32_t> lru_;  // front = most recently used
  std::set<uint32_t> free_;
};

}  // namespace tfring
