// Rank 0's check of one tensor's requests from every rank: they must agree (collective, dtype, device, shape,
// reduce op, scale factors, root, splits...) and be valid. Each step records the first problem as an ERROR
// response naming the tensor, what differs on which rank and the process set, so every rank raises the same.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "message.h"

namespace tfring {

std::string RankListString(const std::vector<int>& ranks);  // "[0, 2]"
std::string FormatNumber(double d);                         // shortest form: 1, 0.5, 1e-06

// Which process set a coordinator serves: messages name the set and the ranks by their global number.
struct SetLabel {
  int id = 0;
  std::vector<int> global_ranks;  // set rank -> global rank; empty: the same numbers
  int Global(int set_rank) const { return global_ranks.empty() ? set_rank : global_ranks[set_rank]; }
  std::string Where() const;  // "" for the global set, else " in process set 3 (ranks [0,2])"
};

// Builds the Response for one tensor from every rank's request (nullptr for a joined rank).
Response BuildResponse(const std::string& name, const std::vector<const Request*>& requests, int joined,
                       const SetLabel& set = SetLabel());

class ResponseBuilder {
 public:
  ResponseBuilder(const std::string& name, const std::vector<const Request*>& reqs, int joined, const SetLabel& set);
  Response Build();

 private:
  using Field = std::function<std::string(const Request&)>;
  // Each step returns true when it recorded an error (the response is then final).
  bool Disagree(const std::string& what, const Field& value);  // ranks differ on `what`
  bool Invalid(const std::string& message);                    // all agree, but the argument cannot work
  bool Fail(const std::string& message);                       // an unsupported combination
  bool CheckCommon();     // collective, dtype, device; GPU or non-allreduce with joined ranks
  bool CheckReduction();  // allreduce / reducescatter: shape, reduce op, scale factors, Adasum's limits
  bool CheckBroadcast();  // root (global rank, member of the set, in range), shape
  bool CheckAllgather();  // rank and trailing dims; output sizes per rank
  bool CheckAlltoall();   // as allgather, plus each rank's splits
  bool CheckSetChange();  // every rank names the same process set change

  const std::string& name_;
  const std::vector<const Request*>& reqs_;
  const int joined_;
  const SetLabel& set_;
  const int size_;
  const Request* first_ = nullptr;  // the first non-joined rank's request
  Response resp_;
};

}  // namespace tfring
