#include "names.h"

namespace tfring {

std::vector<std::string> TensorNames(const std::string& base, int count) {
  if (count <= 1) return {base};
  std::vector<std::string> names;
  names.reserve(count);
  for (int i = 0; i < count; ++i) names.push_back(base + "_" + std::to_string(i + 1) + "of" + std::to_string(count));
  return names;
}

UnnamedCounts& UnnamedCounts::Get() {
  static auto* counts = new UnnamedCounts();  // never destroyed: bindings may name during interpreter exit
  return *counts;
}

std::string UnnamedCounts::Next(const std::string& prefix, int process_set_id, const std::string& scope) {
  std::lock_guard<std::mutex> lock(mu_);
  return prefix + ".noname." + std::to_string(++next_[Key{scope, process_set_id, prefix}]);
}

void UnnamedCounts::RestartSet(int process_set_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = next_.begin(); it != next_.end();) it = it->first.set == process_set_id ? next_.erase(it) : ++it;
}

void UnnamedCounts::RestartAll() {
  std::lock_guard<std::mutex> lock(mu_);
  next_.clear();
}

void UnnamedCounts::ReleaseScope(const std::string& scope) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = next_.begin(); it != next_.end();) it = it->first.scope == scope ? next_.erase(it) : ++it;
}

size_t UnnamedCounts::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_.size();
}

}  // namespace tfring
