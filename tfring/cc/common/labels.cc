#include "labels.h"

#include <mutex>
#include <unordered_map>

namespace tfring {
namespace {

constexpr size_t kMaxLabels = 1 << 20;  // a program naming collectives afresh every step must not grow forever

std::mutex& Mu() {
  static std::mutex* mu = new std::mutex();  // never destroyed: used during interpreter exit
  return *mu;
}

std::unordered_map<std::string, std::string>& Labels() {
  static auto* labels = new std::unordered_map<std::string, std::string>();
  return *labels;
}

}  // namespace

void SetTensorLabel(const std::string& name, const std::string& label) {
  std::lock_guard<std::mutex> lock(Mu());
  auto& labels = Labels();
  if (labels.size() >= kMaxLabels && !labels.count(name)) return;
  labels[name] = label;
}

std::string TensorLabel(const std::string& name) {
  // A graph's node may run under an added prefix (a function call inlined: "StatefulPartitionedCall/..."), so
  // the name's suffixes after each '/' are tried too.
  std::lock_guard<std::mutex> lock(Mu());
  for (size_t pos = 0;;) {
    auto it = Labels().find(name.substr(pos));
    if (it != Labels().end()) return it->second;
    pos = name.find('/', pos);
    if (pos == std::string::npos) return std::string();
    ++pos;
  }
}

}  // namespace tfring
