#include "process_set.h"

#include <algorithm>

namespace tfring {

int ProcessSet::rank_in_set(int global_rank) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), global_rank);
  return it != ranks.end() && *it == global_rank ? static_cast<int>(it - ranks.begin()) : -1;
}

SetLabel ProcessSet::label() const {
  SetLabel l;
  l.id = id;
  if (id != 0) l.global_ranks = ranks;
  return l;
}

std::shared_ptr<ProcessSet> ProcessSetTable::Get(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<ProcessSet>> ProcessSetTable::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<ProcessSet>> out;
  for (const auto& kv : sets_) out.push_back(kv.second);
  return out;
}

int ProcessSetTable::NextId() const {
  std::lock_guard<std::mutex> lock(mu_);
  int id = 0;
  while (sets_.count(id)) ++id;
  return id;
}

int ProcessSetTable::Find(const std::vector<int>& ranks) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& kv : sets_)
    if (kv.second->ranks == ranks) return kv.first;
  return -1;
}

void ProcessSetTable::Put(std::shared_ptr<ProcessSet> set) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_[set->id] = std::move(set);
}

std::shared_ptr<ProcessSet> ProcessSetTable::Remove(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return nullptr;
  auto set = std::move(it->second);
  sets_.erase(it);
  return set;
}

void ProcessSetTable::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  sets_.clear();
}

}  // namespace tfring
