// TensorFlow <-> core adapter: wraps tensorflow::Tensor and OpKernelContext in the core's abstract
// Tensor/OpContext, maps dtypes and Status, and builds the entries every kernel enqueues.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../common/runtime.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfring {
namespace tf {

namespace tfw = ::tensorflow;

class TFTensor : public Tensor {
 public:
  explicit TFTensor(const tfw::Tensor& t) : t_(t) {}
  DataType dtype() const override;
  Shape shape() const override;
  void* data() override { return const_cast<char*>(t_.tensor_data().data()); }
  int64_t size_bytes() const override { return static_cast<int64_t>(t_.TotalBytes()); }

 private:
  tfw::Tensor t_;  // shares the buffer (refcounted), keeping it alive until the collective is done
};

class TFOpContext : public OpContext {
 public:
  explicit TFOpContext(tfw::OpKernelContext* ctx) : ctx_(ctx) {}
  Status AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) override;

 private:
  tfw::OpKernelContext* ctx_;
};

// Output `index` of the op: large CPU outputs come from the warm OutputCache, the rest from TF's allocator.
tfw::Status AllocateOutputTensor(tfw::OpKernelContext* ctx, int index, const tfw::TensorShape& shape,
                                 tfw::Tensor** out);

tfw::Status ToTF(const Status& s);
bool FromTF(tfw::DataType in, DataType* out);

// Negotiation name of the node's collective: its node name, or the last path component.
std::string TensorName(tfw::OpKernelConstruction* c, bool ignore_name_scope);

// Shared completion for ops that enqueue several entries: done() once, with the first error.

class Completion {
 public:
  static StatusCallback Make(tfw::OpKernelContext* ctx, tfw::AsyncOpKernel::DoneCallback done, int count);
};

// Common attrs (process_set_id) and runtime checks; fails the op through ctx and returns false.
bool CheckRuntime(tfw::OpKernelContext* ctx, int process_set_id);

// GPU kernels (NCCL builds): records the input's device and TF's stream in the entry. Fails the op if needed.
bool SetGpuStream(tfw::OpKernelContext* ctx, int index, TensorEntry* entry);

// Request + entry for input `index` of the op, with output `index` preallocated when `same_shape`.
bool MakeEntry(tfw::OpKernelContext* ctx, int index, const std::string& name, OpType op, bool same_shape,
               TensorEntry* entry);

}  // namespace tf
}  // namespace tfring
