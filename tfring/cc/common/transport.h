// The three collectives negotiation needs. MPI implements them for real ranks; the C++ unit tests
// implement them with threads so the protocol is tested without MPI.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "status.h"

namespace tfring {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Status AllreduceBitAnd(std::vector<uint64_t>* bits) = 0;
  // Root (rank 0) receives every rank's bytes in rank order; others get an empty vector.
  virtual Status GatherToRoot(const std::string& mine, std::vector<std::string>* all) = 0;
  virtual Status BroadcastFromRoot(std::string* bytes) = 0;
};

}  // namespace tfring
