// Names of collectives, one rule for every binding. A named collective negotiates as the binding gives it (torch and
// MXNet: Horovod's "<prefix>.<name>"); one the user did not name gets "<prefix>.noname.<n>", n counted per (kind,
// process set, scope). Every member of a set issues the same sequence of unnamed collectives of a kind on it, so n
// agrees across ranks (Horovod counts every handle, which diverges as soon as one rank runs an extra collective
// elsewhere). The counts restart on every member at the same point: init, shutdown, a completed join on the set
// (joined ranks skipped the others' unnamed collectives) and the set's removal (its id may be reused). A scope
// counts apart: JAX names a traced function's collectives per trace, so a compiled program keeps its names however
// often other functions were traced.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tfring {

// The names a call of `count` tensors negotiates: {base} for one, "<base>_<i>of<count>" for each of a group.
std::vector<std::string> TensorNames(const std::string& base, int count);

class UnnamedCounts {
 public:
  static UnnamedCounts& Get();
  // "<prefix>.noname.<n>" for the next unnamed collective of kind `prefix` on the set, in `scope` ("": none).
  std::string Next(const std::string& prefix, int process_set_id, const std::string& scope = "");
  void RestartSet(int process_set_id);  // every scope's counts on the set
  void RestartAll();
  void ReleaseScope(const std::string& scope);  // a scope that will not count again (a trace freed)
  size_t size();

 private:
  struct Key {
    std::string scope;
    int set;
    std::string prefix;
    bool operator==(const Key& o) const { return set == o.set && scope == o.scope && prefix == o.prefix; }
  };
  struct Hash {
    size_t operator()(const Key& k) const {
      return std::hash<std::string>()(k.scope) ^ (std::hash<std::string>()(k.prefix) * 31) ^ std::hash<int>()(k.set);
    }
  };
  std::mutex mu_;
  std::unordered_map<Key, int64_t, Hash> next_;
};

}  // namespace tfring
