// Rank 0's side of negotiation: collects every rank's requests by name, decides which are ready on all
// ranks (or joined), and checks that all ranks agree before anything runs. A disagreement becomes an
// ERROR response naming the tensor and what differs on which rank, delivered to every rank.
#pragma once
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "message.h"
#include "response_builder.h"

namespace tfring {

// The stall inspector's settings; seconds <= 0 turns that part off. clock() returns seconds.
struct StallOptions {
  double warn_seconds = 0;
  double shutdown_seconds = 0;
  std::function<double()> clock;
};

class Timeline;

class Coordinator {
 public:
  Coordinator(int size, StallOptions stall, Timeline* timeline = nullptr, SetLabel set = SetLabel())
      : size_(size), joined_(size, false), stall_(std::move(stall)), timeline_(timeline), set_(std::move(set)) {}
  void Add(int rank, const RequestList& list);
  ResponseList Build();
  size_t pending() const { return table_.size(); }

 private:
  // Warns about (and past the shutdown time, fails) names some ranks submitted long ago and others never did.
  void InspectStalls(const std::vector<std::string>& waiting, ResponseList* out);
  // "; rank R waits itself on 'name' since N s" for each of `ranks` (set ranks); oldest: each rank's oldest
  // waiting name ("" if none).
  std::string WaitsOn(const std::vector<std::string>& oldest, const std::vector<int>& ranks, double now);
  static std::string Described(const std::string& name);  // 'name' (its label)

  int size_;
  std::vector<bool> joined_;
  int last_joined_ = -1;
  int shutdown_rank_ = -1;
  std::unordered_map<std::string, std::vector<Request>> table_;  // name -> requests received so far
  std::vector<std::string> order_;                               // first-arrival order
  StallOptions stall_;
  Timeline* timeline_;
  SetLabel set_;
  std::unordered_map<std::string, double> first_seen_, last_warned_;
};

}  // namespace tfring
