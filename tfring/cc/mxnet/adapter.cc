#include "adapter.h"

#include <cstring>

namespace tfring {
namespace mxnet_binding {

bool FromMX(int type_flag, DataType* out) {
  switch (type_flag) {  // mshadow::TypeFlag (mshadow/base.h)
    case 0:
      *out = DataType::FLOAT32;
      return true;
    case 1:
      *out = DataType::FLOAT64;
      return true;
    case 2:
      *out = DataType::FLOAT16;
      return true;
    case 3:
      *out = DataType::UINT8;
      return true;
    case 4:
      *out = DataType::INT32;
      return true;
    case 5:
      *out = DataType::INT8;
      return true;
    case 6:
      *out = DataType::INT64;
      return true;
    case 7:
      *out = DataType::BOOL;
      return true;
    case 8:
      *out = DataType::INT16;
      return true;
    case 9:
      *out = DataType::UINT16;
      return true;
    case 12:
      *out = DataType::BFLOAT16;
      return true;
    default:  // uint32, uint64: the core has no such type
      return false;
  }
}

bool NDTensor::Bind(NDArrayHandle handle, std::string* error) {
  int flag = -1, ndim = 0;
  const int* dims = nullptr;
  if (MXNDArrayGetDType(handle, &flag) != 0 || MXNDArrayGetShapeEx(handle, &ndim, &dims) != 0 ||
      MXNDArrayGetData(handle, &data_) != 0) {
    *error = std::string("tfring: mxnet could not describe an NDArray: ") + MXGetLastError();
    return false;
  }
  if (!FromMX(flag, &dtype_)) {
    *error = "tfring: NDArray dtype code " + std::to_string(flag) + " is not supported";
    return false;
  }
  shape_.assign(dims, dims + (ndim > 0 ? ndim : 0));
  return true;
}

HostTensor::HostTensor(DataType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  // At least one byte, so data() is never null even for an empty output.
  owned_.assign(static_cast<size_t>(NumElements(shape_) * DataTypeSize(dtype_)) + 1, 0);
  data_ = owned_.data();
}

StatusCallback HostOpState::MakeCallback(const std::shared_ptr<HostOpState>& self) {
  return [self](const Status& s) {
    {
      std::lock_guard<std::mutex> lock(self->mu);
      if (!s.ok() && self->status.ok()) self->status = s;
      if (--self->remaining > 0) return;
    }
    self->cv.notify_all();
  };
}

Status HostOpState::Wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [this] { return remaining <= 0; });
  return status;
}

Status HostOpContext::AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (index < 0 || index >= static_cast<int>(dtypes_.size()))
    return Status::Unknown("tfring: output index " + std::to_string(index) + " out of range");
  std::shared_ptr<HostTensor> t;
  try {
    t = std::make_shared<HostTensor>(dtypes_[index], shape);
  } catch (const std::exception& e) {  // out of memory: no exception may cross the background thread
    return Status::Unknown("tfring: could not allocate an output of shape " + ShapeString(shape) + ": " + e.what());
  }
  state_->outputs[index] = t;
  *out = t;
  return Status::OK();
}

}  // namespace mxnet_binding
}  // namespace tfring
