// PyTorch <-> core adapter: wraps at::Tensor in the core's Tensor, allocates outputs whose shape is known only
// after negotiation, and tracks each Python-visible operation by an int handle (Horovod's torch API).
// Nothing here touches Python: callbacks run on the core's background thread without the GIL.
#pragma once
#include <ATen/ATen.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../common/runtime.h"

namespace tfring {
namespace torch_binding {

// The core's dtype for a torch dtype; false if the core has none (complex, float8, ...).
bool FromTorch(at::ScalarType in, DataType* out);

class TorchTensor : public Tensor {
 public:
  explicit TorchTensor(at::Tensor t) : t_(std::move(t)) {}
  DataType dtype() const override;
  Shape shape() const override;
  void* data() override { return t_.data_ptr(); }
  int64_t size_bytes() const override { return static_cast<int64_t>(t_.nbytes()); }

 private:
  at::Tensor t_;  // holds the storage until the core drops the entry
};

// One operation as Python sees it (a grouped op is one handle): its outputs, kept alive until Python takes them,
// and its completion. Entries complete on the background thread; Python waits on `cv`.
struct OpState {
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 0;  // entries whose callback has not run yet
  bool done = false;
  bool failed_at_enqueue = false;  // a callback ran on the enqueuing thread: the core refused the entries
  Status status;                   // the first error of any entry
  std::thread::id enqueuer;
  std::vector<at::Tensor> inputs;              // keeps inputs alive (the entries hold them too; belt and braces)
  std::vector<at::Tensor> outputs;             // output i of the op; undefined until allocated
  std::vector<at::TensorOptions> out_options;  // how output i is allocated by AllocateOutput
  at::Tensor join_result;                      // join: int32 scalar the core writes the last joined rank into

  // The callback every entry of the op shares: done once all ran, with the first error.
  StatusCallback MakeCallback(const std::shared_ptr<OpState>& self);
};

// Allocates output `index` of an op on the background thread (allgather, alltoall, reducescatter).
class TorchOpContext : public OpContext {
 public:
  explicit TorchOpContext(std::shared_ptr<OpState> state) : state_(std::move(state)) {}
  Status AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) override;

 private:
  std::shared_ptr<OpState> state_;
};

// Handles are ints (Horovod's torch API): Python polls, waits for and releases them by number.
// Handles, and the names they hold: a name the user gave stays taken from the call until its handle is waited on
// (or released), not only while the core runs it, so submitting a name twice before synchronizing the first is
// refused on the rank that does it whatever the timing (Horovod: the first may have completed already).
class HandleTable {
 public:
  // Throws std::invalid_argument when one of `names` is held by an unreleased handle of the same process set.
  int Add(std::shared_ptr<OpState> state, int process_set_id, const std::vector<std::string>& names);
  std::shared_ptr<OpState> Get(int handle);  // throws std::invalid_argument for an unknown handle
  void Release(int handle);
  void Reset();

 private:
  std::mutex mu_;
  int last_ = 0;
  std::unordered_map<int, std::shared_ptr<OpState>> states_;
  std::unordered_map<int, std::vector<std::string>> keys_;  // handle -> the "<set>|<name>" keys it holds
  std::unordered_set<std::string> held_;
};

}  // namespace torch_binding
}  // namespace tfring
