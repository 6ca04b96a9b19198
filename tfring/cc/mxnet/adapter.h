// MXNet <-> core adapter. Only mxnet's C API (c_api.h) and the engine's callback type (engine.h) are used: no
// NDArray C++ member is called, so libmxnet's C++ ABI never matters. Two kinds of tensors reach the core:
// NDArrays (engine path: allreduce, broadcast, run inside an MXNet engine op) and host buffers (allgather,
// alltoall, reducescatter, whose output shape is known only after negotiation).
#pragma once
#include <mxnet/c_api.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../common/runtime.h"

namespace tfring {
namespace mxnet_binding {

// The core's dtype for an mshadow type flag (mx.nd.NDArray.dtype's numeric code); false if the core has none.
bool FromMX(int type_flag, DataType* out);

// An NDArray the engine op holds (a detached handle sharing the array's storage and engine variable). Its data
// pointer is read when the engine runs the op, once every write to it has completed.
class NDTensor : public Tensor {
 public:
  // Reads dtype, shape and data of `handle` (not owned). Returns false, with *error, if mxnet refuses.
  bool Bind(NDArrayHandle handle, std::string* error);
  DataType dtype() const override { return dtype_; }
  Shape shape() const override { return shape_; }
  void* data() override { return data_; }
  int64_t size_bytes() const override { return NumElements(shape_) * DataTypeSize(dtype_); }

 private:
  DataType dtype_ = DataType::FLOAT32;
  Shape shape_;
  void* data_ = nullptr;
};

// Host memory: a caller's buffer (input), or one the binding owns (outputs allocated after negotiation).
class HostTensor : public Tensor {
 public:
  HostTensor(DataType dtype, Shape shape, void* data) : dtype_(dtype), shape_(std::move(shape)), data_(data) {}
  HostTensor(DataType dtype, Shape shape);  // owns a zeroed buffer of that shape
  DataType dtype() const override { return dtype_; }
  Shape shape() const override { return shape_; }
  void* data() override { return data_; }
  int64_t size_bytes() const override { return NumElements(shape_) * DataTypeSize(dtype_); }

 private:
  DataType dtype_;
  Shape shape_;
  std::vector<char> owned_;
  void* data_;
};

// Completion of a host-path op: Python's thread blocks in Wait() (ctypes released the GIL) until every entry ran.
struct HostOpState {
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 0;
  Status status;
  std::vector<std::shared_ptr<HostTensor>> outputs;  // output i of the op, allocated by the core's context

  StatusCallback MakeCallback(const std::shared_ptr<HostOpState>& self);
  Status Wait();
};

// Allocates output `index` (and alltoall's received splits) in host memory once the core knows its shape.
class HostOpContext : public OpContext {
 public:
  HostOpContext(std::shared_ptr<HostOpState> state, std::vector<DataType> dtypes)
      : state_(std::move(state)), dtypes_(std::move(dtypes)) {}
  Status AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) override;

 private:
  std::shared_ptr<HostOpState> state_;
  std::vector<DataType> dtypes_;  // dtype of each output index
};

}  // namespace mxnet_binding
}  // namespace tfring
