// What the core sees of a framework: a tensor it can read/write, a context that can allocate outputs
// whose shape is only known after negotiation, and a completion callback.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "message.h"
#include "status.h"
#include "types.h"

namespace tfring {

class Tensor {
 public:
  virtual ~Tensor() = default;
  virtual DataType dtype() const = 0;
  virtual Shape shape() const = 0;
  virtual void* data() = 0;
  virtual int64_t size_bytes() const = 0;
};

class OpContext {
 public:
  virtual ~OpContext() = default;
  // Allocate output `index` of the op (thread-safe for async kernels).
  virtual Status AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) = 0;
};

using StatusCallback = std::function<void(const Status&)>;

struct TensorEntry {
  Request request;                 // what this rank asks for (name, op, dtype, shape, ...)
  std::shared_ptr<Tensor> input;   // may be null (join, barrier)
  std::shared_ptr<Tensor> output;  // preallocated when the shape is known locally, else set at execution
  std::shared_ptr<OpContext> context;
  int output_index = 0;            // which output of the op (grouped ops own several)
  int extra_output_index = -1;     // alltoall's received_splits output
  int32_t* join_result = nullptr;  // join: where to write the last rank to join
  StatusCallback callback;
  double submitted = 0;  // steady-clock seconds at Enqueue (the monitor's waiting time starts here)
  // GPU tensors (request.device >= 0): the framework's stream that produces the input, and the event the
  // GPU backend records on it at enqueue (its own stream waits on that event, never the host).
  void* gpu_stream = nullptr;
  std::shared_ptr<void> ready_event;
};

}  // namespace tfring
