// What the CPU and GPU XLA FFI handlers share: XLA buffers seen as the core's Tensor, one handler call as the
// core's OpContext, and the entries built from a call's operands. Only how a call completes (a future on CPU, a
// blocking wait on GPU) and where a wrongly-shaped result's scratch lives (host or device memory) differ.
#pragma once
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "../common/runtime.h"
#include "xla/ffi/api/ffi.h"

namespace tfring {
namespace xla_ffi {

namespace ffi = ::xla::ffi;

// A buffer XLA owns (and keeps alive until the handler returns or its future completes).
class XlaTensor : public Tensor {
 public:
  XlaTensor(void* data, DataType dtype, Shape shape) : data_(data), dtype_(dtype), shape_(std::move(shape)) {}
  DataType dtype() const override { return dtype_; }
  Shape shape() const override { return shape_; }
  void* data() override { return data_; }
  int64_t size_bytes() const override { return NumElements(shape_) * DataTypeSize(dtype_); }

 private:
  void* data_;
  DataType dtype_;
  Shape shape_;
};

ffi::ErrorCode ToXla(StatusCode code);

// One handler call: the results XLA allocated and how many of its entries are still running.
class Call : public OpContext {
 public:
  std::vector<std::shared_ptr<XlaTensor>> results;  // output i of the call
  std::vector<std::shared_ptr<XlaTensor>> extra;    // alltoall: received splits (int32), one per entry
  std::atomic<int> remaining{0};
  std::string fn;

  // The core negotiated the output's shape; XLA fixed it when the program was compiled. When they differ this
  // rank still takes part in the transfer (into a scratch buffer of the negotiated size), so its peers, whose
  // shapes may be right, are not left waiting inside the transfer; then this call fails with both shapes named.
  Status AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) override;
  void Fail(const Status& s);
  // An entry finished; the last one completes the call with the first error, if any.
  void Done(const Status& s);

 protected:
  // Memory for a wrongly-shaped result, valid until the call is destroyed.
  virtual void* Scratch(int64_t bytes) = 0;
  virtual void Complete(const Status& s) = 0;
  std::mutex mu_;

 private:
  Status first_error_;
};

struct CallArgs {
  const char* fn;
  OpType op;
  std::string_view name;
  int64_t reduce_op = 1;
  double prescale = 1.0, postscale = 1.0;
  int64_t root = 0;
  std::vector<int64_t> splits;
};

// One entry per operand (a grouped call names them "<name>_<i>of<n>", as Horovod's grouped ops), the results
// recorded in `call`. Returns an empty string, or why the call is refused.
std::string BuildEntries(const CallArgs& a, ffi::RemainingArgs args, ffi::RemainingRets rets,
                         const std::shared_ptr<Call>& call, std::vector<TensorEntry>* entries);

// Gives each entry `call` as its context and completion, then enqueues them all at once.
void EnqueueCall(const std::shared_ptr<Call>& call, std::vector<TensorEntry> entries, int64_t set);

// The attributes of allreduce and reducescatter, after a binding's operands (the CPU or the GPU handlers').
template <typename Binding>
auto ReductionAttrs(Binding b) {
  return std::move(b)
      .template Attr<std::string_view>("name")
      .template Attr<int64_t>("reduce_op")
      .template Attr<double>("prescale")
      .template Attr<double>("postscale")
      .template Attr<int64_t>("process_set");
}

// Exports the five collectives' handlers as the C functions tfring.jax looks up (<prefix>allreduce, ...), each
// binding the file's own Bind() (its operands) and then the collective's attributes. A macro: the names are pasted.
#define TFR_XLA_HANDLER_SYMBOLS(prefix)                                                                             \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(prefix##allreduce, Allreduce, ReductionAttrs(Bind()));                              \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(prefix##allgather, Allgather,                                                       \
                                Bind().Attr<std::string_view>("name").Attr<int64_t>("process_set"));                \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(                                                                                    \
      prefix##broadcast, Broadcast,                                                                                 \
      Bind().Attr<std::string_view>("name").Attr<int64_t>("root_rank").Attr<int64_t>("process_set"));               \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(                                                                                    \
      prefix##alltoall, Alltoall,                                                                                   \
      Bind().Attr<std::string_view>("name").Attr<ffi::Span<const int64_t>>("splits").Attr<int64_t>("process_set")); \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(prefix##reducescatter, Reducescatter, ReductionAttrs(Bind()))

}  // namespace xla_ffi
}  // namespace tfring
