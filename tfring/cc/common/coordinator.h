// Rank 0's side of negotiation: collects every rank's requests by name, decides which are ready on all
// ranks (or joined), and checks that all ranks agree before anything runs. A disagreement becomes an
// ERROR response naming the tensor and what differs on which rank, delivered to every rank.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "message.h"

namespace tfring {

// Builds the Response for one tensor from every rank's request (nullptr for a joined rank).
Response BuildResponse(const std::string& name, const std::vector<const Request*>& requests, int joined);

class Coordinator {
 public:
  explicit Coordinator(int size) : size_(size), joined_(size, false) {}
  void Add(const RequestList& list);
  ResponseList Build();
  size_t pending() const { return table_.size(); }

 private:
  int size_;
  std::vector<bool> joined_;
  int last_joined_ = -1;
  bool shutdown_ = false;
  std::unordered_map<std::string, std::vector<Request>> table_;  // name -> requests received so far
  std::vector<std::string> order_;                                // first-arrival order
};

}  // namespace tfring
