// tfring.mxnet._tfring_mxnet: a C API loaded with ctypes (as mxnet's own libmxnet and Horovod's mxnet binding).
// Allreduce and broadcast run as asynchronous MXNet engine ops: the engine starts them once every pending write
// to their NDArrays is done, and tfring's background thread calls the engine's completion callback, so Python
// returns at once and later reads of the output wait on the engine as for any MXNet op. Allgather, alltoall and
// reducescatter run on host copies and block (Horovod's mxnet allgather blocks too): their output shape is only
// known after negotiation, and the C API cannot resize an existing NDArray.
#include <mxnet/engine.h>  // engine::CallbackOnComplete, FnProperty, Context: header-only types

#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "adapter.h"

using tfring::DataType;
using tfring::OpType;
using tfring::ReduceOp;
using tfring::Runtime;
using tfring::Status;
using tfring::StatusCode;
using tfring::TensorEntry;
using tfring::mxnet_binding::FromMX;
using tfring::mxnet_binding::HostOpContext;
using tfring::mxnet_binding::HostOpState;
using tfring::mxnet_binding::HostTensor;
using tfring::mxnet_binding::NDTensor;

namespace {

thread_local std::string g_error;  // the message of this thread's last failed call

// Return codes: 0 OK, else 1 + StatusCode, so Python raises ValueError / RuntimeError / HorovodInternalError.
int Fail(StatusCode code, const std::string& message) {
  g_error = message;
  return 1 + static_cast<int>(code);
}

int Fail(const Status& s) { return Fail(s.code(), s.message()); }

// One engine op: the detached NDArray handles it owns (freed by the engine's deleter after completion) and the
// requests of its entries (names, reduction, root).
struct EngineOp {
  std::vector<NDArrayHandle> inputs, outputs;  // outputs[i] == inputs[i] when in place
  std::vector<bool> in_place;
  std::vector<tfring::Request> requests;
  int process_set_id = 0;
};

void DeleteEngineOp(void* param) {
  auto* op = static_cast<EngineOp*>(param);
  for (size_t i = 0; i < op->inputs.size(); ++i) {
    MXNDArrayFree(op->inputs[i]);
    if (!op->in_place[i]) MXNDArrayFree(op->outputs[i]);
  }
  delete op;
}

// Calls the engine's completion callback once every entry's callback ran. An error is handed to the engine as a
// dmlc::Error: MXNet records it on the output arrays and raises MXNetError at their next wait_to_read/asnumpy.
struct EngineCompletion {
  std::mutex mu;
  int remaining;
  Status status;
  mxnet::engine::CallbackOnComplete on_complete;

  void Done(const Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!s.ok() && status.ok()) status = s;
      if (--remaining > 0) return;
    }
    if (status.ok()) {
      on_complete();
    } else {
      dmlc::Error error(status.message());
      on_complete(&error);
    }
  }
};

// The engine runs this once the inputs are readable and the outputs writable (EngineAsyncFunc).
void RunEngineOp(void* /*run_ctx*/, void* on_complete_ptr, void* param) {
  auto* op = static_cast<EngineOp*>(param);
  auto done = std::make_shared<EngineCompletion>();
  done->on_complete = *static_cast<mxnet::engine::CallbackOnComplete*>(on_complete_ptr);  // a copy: ours to keep
  done->remaining = static_cast<int>(op->requests.size());
  std::vector<TensorEntry> entries;
  for (size_t i = 0; i < op->requests.size(); ++i) {
    auto in = std::make_shared<NDTensor>();
    auto out = in;
    std::string error;
    bool ok = in->Bind(op->inputs[i], &error);
    if (ok && !op->in_place[i]) {
      out = std::make_shared<NDTensor>();
      ok = out->Bind(op->outputs[i], &error);
    }
    if (!ok) {  // entries already built still run: complete the rest with the error
      for (size_t j = i; j < op->requests.size(); ++j) done->Done(Status::Unknown(error));
      break;
    }
    TensorEntry e;
    e.request = op->requests[i];
    e.input = in;
    e.output = out;
    e.callback = [done](const Status& s) { done->Done(s); };
    entries.push_back(std::move(e));
  }
  if (!entries.empty()) Runtime::Get().Enqueue(std::move(entries), op->process_set_id);
}

// Checks an NDArray on the caller's thread and fills the request's dtype and shape.
int Describe(NDArrayHandle h, const std::string& what, tfring::Request* r) {
  int flag = -1, ndim = 0, dev_type = 0, dev_id = 0, stype = 0;
  const int* dims = nullptr;
  if (MXNDArrayGetDType(h, &flag) != 0 || MXNDArrayGetShapeEx(h, &ndim, &dims) != 0 ||
      MXNDArrayGetContext(h, &dev_type, &dev_id) != 0 || MXNDArrayGetStorageType(h, &stype) != 0)
    return Fail(StatusCode::INVALID_ARGUMENT, "tfring: " + what + ": " + MXGetLastError());
  if (!FromMX(flag, &r->dtype))
    return Fail(StatusCode::INVALID_ARGUMENT,
                "tfring: " + what + " has a dtype tfring does not support (code " + std::to_string(flag) + ")");
  if (dev_type == 2)  // kGPU: this prototype runs collectives on host memory only
    return Fail(StatusCode::INVALID_ARGUMENT, "tfring: " + what + " is on a GPU; tfring.mxnet supports CPU arrays");
  if (stype != 0)  // kDefaultStorage
    return Fail(StatusCode::INVALID_ARGUMENT, "tfring: " + what + " is a sparse NDArray; use dense arrays");
  r->shape.assign(dims, dims + (ndim > 0 ? ndim : 0));
  // An array in an MKL-DNN layout (a convolution's output) is converted to the default layout by
  // MXNDArrayGetData, which then waits for it: here, on the caller's thread (Python waited for its producer, so
  // the layout is final). Inside the engine op, that wait would be on the op itself (a deadlock).
  void* data = nullptr;
  if (MXNDArrayGetData(h, &data) != 0)
    return Fail(StatusCode::INVALID_ARGUMENT, "tfring: " + what + ": " + MXGetLastError());
  return 0;
}

}  // namespace

extern "C" {

const char* tfring_mxnet_last_error() { return g_error.c_str(); }

// Pushes allreduce (op 0) or broadcast (op 2) of n NDArrays as one engine op; outputs[i] == inputs[i] is in
// place. names[i]: the full tensor name, the same on every rank. Returns 0 or an error code (see Fail).
int tfring_mxnet_push(int op_type, int n, NDArrayHandle* inputs, NDArrayHandle* outputs, const char** names,
                      int reduce_op, double prescale, double postscale, int root_rank, int process_set_id,
                      int priority) {
  try {
    Status ready = Runtime::Get().CheckReady();
    if (!ready.ok()) return Fail(ready);
    Status member = Runtime::Get().CheckMember(process_set_id);
    if (!member.ok()) return Fail(member);
    auto op = std::make_unique<EngineOp>();
    op->process_set_id = process_set_id;
    std::vector<NDArrayHandle> const_nds, mutable_nds;
    for (int i = 0; i < n; ++i) {
      tfring::Request r;
      r.op = static_cast<OpType>(op_type);
      r.name = names[i];
      r.reduce_op = static_cast<ReduceOp>(reduce_op);
      r.prescale = prescale;
      r.postscale = postscale;
      r.root_rank = root_rank;
      if (int rc = Describe(inputs[i], "tensors[" + std::to_string(i) + "]", &r)) return rc;
      tfring::Request o;
      if (int rc = Describe(outputs[i], "outputs[" + std::to_string(i) + "]", &o)) return rc;
      if (o.dtype != r.dtype || o.shape != r.shape)
        return Fail(StatusCode::INVALID_ARGUMENT, "tfring: output " + std::to_string(i) + " must match its input");
      op->requests.push_back(std::move(r));
    }
    // Own detached handles (same storage and engine variable) so the arrays outlive the op whatever Python does.
    for (int i = 0; i < n; ++i) {
      NDArrayHandle in = nullptr, out = nullptr;
      const bool in_place = inputs[i] == outputs[i];
      if (MXNDArrayDetach(inputs[i], &in) != 0 || (!in_place && MXNDArrayDetach(outputs[i], &out) != 0)) {
        const std::string msg = MXGetLastError();
        if (in) MXNDArrayFree(in);
        DeleteEngineOp(op.release());
        return Fail(StatusCode::UNKNOWN, "tfring: " + msg);
      }
      op->inputs.push_back(in);
      op->outputs.push_back(in_place ? in : out);
      op->in_place.push_back(in_place);
      if (!in_place) const_nds.push_back(in);
      mutable_nds.push_back(in_place ? in : out);
    }
    static const mxnet::Context kCPU = mxnet::Context::CPU();
    // Horovod's choice: the prioritized CPU pool, so collectives are not queued behind compute kernels.
    static const mxnet::FnProperty kProp = mxnet::FnProperty::kCPUPrioritized;
    const char* label = op_type == static_cast<int>(OpType::BROADCAST) ? "tfring_broadcast" : "tfring_allreduce";
    EngineOp* raw = op.release();  // the engine owns it from here (DeleteEngineOp)
    if (MXEnginePushAsyncND(RunEngineOp, raw, DeleteEngineOp, &kCPU, const_nds.data(),
                            static_cast<int>(const_nds.size()), mutable_nds.data(),
                            static_cast<int>(mutable_nds.size()), &kProp, priority, label, false) != 0)
      return Fail(StatusCode::UNKNOWN, std::string("tfring: MXEnginePushAsyncND failed: ") + MXGetLastError());
    return 0;
  } catch (const std::exception& e) {
    return Fail(StatusCode::UNKNOWN, e.what());
  }
}

// Runs op_type (allgather 1, alltoall 3, reducescatter 4) on n host buffers and blocks until done (ctypes has
// released the GIL). shapes: the ndims[i] dims of each input, concatenated. On success *result holds the outputs
// (alltoall: the output, then the received splits as int32) for tfring_mxnet_result_*.
int tfring_mxnet_host_run(int op_type, int n, void** data, const int* type_flags, const int* ndims,
                          const int64_t* shapes, const char** names, int reduce_op, double prescale, double postscale,
                          const int64_t* splits, int num_splits, int process_set_id, void** result) {
  try {
    auto state = std::make_shared<HostOpState>();
    std::vector<DataType> out_dtypes;
    std::vector<TensorEntry> entries;
    const int64_t* dims = shapes;
    for (int i = 0; i < n; ++i) {
      TensorEntry e;
      e.request.op = static_cast<OpType>(op_type);
      e.request.name = names[i];
      e.request.reduce_op = static_cast<ReduceOp>(reduce_op);
      e.request.prescale = prescale;
      e.request.postscale = postscale;
      if (!FromMX(type_flags[i], &e.request.dtype))
        return Fail(StatusCode::INVALID_ARGUMENT,
                    "tfring: dtype code " + std::to_string(type_flags[i]) + " is not supported");
      e.request.shape.assign(dims, dims + ndims[i]);
      dims += ndims[i];
      if (e.request.op == OpType::ALLTOALL) {
        e.request.splits.assign(splits, splits + num_splits);
        e.extra_output_index = static_cast<int>(out_dtypes.size()) + 1;
      }
      e.input = std::make_shared<HostTensor>(e.request.dtype, e.request.shape, data[i]);
      e.output_index = static_cast<int>(out_dtypes.size());
      out_dtypes.push_back(e.request.dtype);
      if (e.request.op == OpType::ALLTOALL) out_dtypes.push_back(DataType::INT32);
      entries.push_back(std::move(e));
    }
    state->remaining = n;
    state->outputs.resize(out_dtypes.size());
    auto ctx = std::make_shared<HostOpContext>(state, out_dtypes);
    auto cb = state->MakeCallback(state);
    for (auto& e : entries) {
      e.callback = cb;
      e.context = ctx;
    }
    Runtime::Get().Enqueue(std::move(entries), process_set_id);
    Status s = state->Wait();
    if (!s.ok()) return Fail(s);
    *result = new std::shared_ptr<HostOpState>(state);
    return 0;
  } catch (const std::exception& e) {
    return Fail(StatusCode::UNKNOWN, e.what());
  }
}

int tfring_mxnet_result_count(void* result) {
  return static_cast<int>((*static_cast<std::shared_ptr<HostOpState>*>(result))->outputs.size());
}

// Number of dims of output i; its dims go to `dims` (room for that many), if not null.
int tfring_mxnet_result_shape(void* result, int i, int64_t* dims) {
  const auto& t = (*static_cast<std::shared_ptr<HostOpState>*>(result))->outputs.at(i);
  const auto shape = t->shape();
  if (dims)
    for (size_t k = 0; k < shape.size(); ++k) dims[k] = shape[k];
  return static_cast<int>(shape.size());
}

// Copies output i into dst (its size_bytes()).
void tfring_mxnet_result_copy(void* result, int i, void* dst) {
  const auto& t = (*static_cast<std::shared_ptr<HostOpState>*>(result))->outputs.at(i);
  if (t->size_bytes() > 0) std::memcpy(dst, t->data(), static_cast<size_t>(t->size_bytes()));
}

void tfring_mxnet_result_free(void* result) { delete static_cast<std::shared_ptr<HostOpState>*>(result); }

}  // extern "C"
