#include "adapter.h"

#include "../common/logging.h"
#include "output_cache.h"

#ifdef TFRING_HAVE_NCCL
#include "xla/stream_executor/stream.h"
#include "xla/stream_executor/stream_executor.h"
#endif

#include <atomic>
#include <mutex>

namespace tfring {
namespace tf {

DataType TFTensor::dtype() const {
  DataType d = DataType::UINT8;
  FromTF(t_.dtype(), &d);
  return d;
}

Shape TFTensor::shape() const {
  Shape s;
  for (int i = 0; i < t_.dims(); ++i) s.push_back(t_.dim_size(i));
  return s;
}

Status TFOpContext::AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) {
  tfw::TensorShape ts;
  for (int64_t d : shape) ts.AddDim(d);
  tfw::Tensor* t = nullptr;
  tfw::Status s = AllocateOutputTensor(ctx_, index, ts, &t);
  if (!s.ok()) return Status::Unknown("tfring: could not allocate output: " + std::string(s.message()));
  out->reset(new TFTensor(*t));
  return Status::OK();
}

tfw::Status AllocateOutputTensor(tfw::OpKernelContext* ctx, int index, const tfw::TensorShape& shape,
                                 tfw::Tensor** out) {
  OutputCache* cache = OutputCache::Get();
  const tfw::DataType dtype = ctx->expected_output_dtype(index);
  const int64_t bytes = shape.num_elements() * tfw::DataTypeSize(dtype);
  if (cache->capacity() > 0 && bytes >= static_cast<int64_t>(OutputCache::kMinBytes) &&
      ctx->device()->device_type() == tfw::DEVICE_CPU) {
    tfw::Tensor t(cache, dtype, shape);
    if (t.IsInitialized()) {
      ctx->set_output(index, t);
      *out = ctx->mutable_output(index);
      return tfw::OkStatus();
    }
  }
  return ctx->allocate_output(index, shape, out);
}

tfw::Status ToTF(const Status& s) {
  switch (s.code()) {
    case StatusCode::OK:
      return tfw::OkStatus();
    case StatusCode::INVALID_ARGUMENT:
      return tfw::errors::InvalidArgument(s.message());
    case StatusCode::PRECONDITION_ERROR:
      return tfw::errors::FailedPrecondition(s.message());
    case StatusCode::ABORTED:
      return tfw::errors::Aborted(s.message());
    case StatusCode::DEADLINE_EXCEEDED:
      return tfw::errors::DeadlineExceeded(s.message());
    case StatusCode::WORKERS_FAILED:  // tfring.elastic turns it into HorovodInternalError
      return tfw::errors::Unavailable(s.message());
    default:
      return tfw::errors::Unknown(s.message());
  }
}

bool FromTF(tfw::DataType in, DataType* out) {
  static const tfw::DataType kTypes[] = {tfw::DT_UINT8,  tfw::DT_INT8,  tfw::DT_UINT16,  tfw::DT_INT16,
                                         tfw::DT_INT32,  tfw::DT_INT64, tfw::DT_HALF,    tfw::DT_FLOAT,
                                         tfw::DT_DOUBLE, tfw::DT_BOOL,  tfw::DT_BFLOAT16};  // DataType's order
  return EnumOf(kTypes, in, out);
}

std::string TensorName(tfw::OpKernelConstruction* c, bool ignore_name_scope) {
  std::string name;
  if (c->GetAttr("tensor_name", &name).ok() && !name.empty()) return name;
  name = c->def().name();
  if (ignore_name_scope) {
    auto pos = name.rfind('/');
    if (pos != std::string::npos) name = name.substr(pos + 1);
  }
  return name;
}

namespace {
struct SharedDone {
  std::atomic<int> remaining;
  std::mutex mu;
  Status first_error;
  tfw::OpKernelContext* ctx;
  tfw::AsyncOpKernel::DoneCallback done;
};
}  // namespace

StatusCallback Completion::Make(tfw::OpKernelContext* ctx, tfw::AsyncOpKernel::DoneCallback done, int count) {
  auto shared = std::make_shared<SharedDone>();
  shared->remaining = count;
  shared->ctx = ctx;
  shared->done = std::move(done);
  return [shared](const Status& s) {
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(shared->mu);
      if (shared->first_error.ok()) shared->first_error = s;
    }
    if (--shared->remaining == 0) {
      if (!shared->first_error.ok()) shared->ctx->SetStatus(ToTF(shared->first_error));
      shared->done();
    }
  };
}

bool CheckRuntime(tfw::OpKernelContext* ctx, int process_set_id) {
  Status s = Runtime::Get().CheckReady();
  if (s.ok()) s = Runtime::Get().CheckMember(process_set_id);
  if (!s.ok()) {
    ctx->SetStatus(ToTF(s));
    return false;
  }
  return true;
}

bool SetGpuStream(tfw::OpKernelContext* ctx, int index, TensorEntry* entry) {
#ifdef TFRING_HAVE_NCCL
  // On a GPU kernel the input lives in device memory: the core needs TF's stream (to wait on, not to block)
  // and the CUDA ordinal of the device.
  if (ctx->op_kernel().input_memory_types()[index] != tfw::DEVICE_MEMORY) return true;
  tfw::DeviceContext* dc = ctx->op_device_context();
  stream_executor::Stream* stream = dc ? dc->stream() : nullptr;
  if (stream == nullptr) return true;  // not a GPU device after all (CPU device memory)
  entry->gpu_stream = stream->platform_specific_handle().stream;
  entry->request.device = stream->parent()->device_ordinal();
  if (entry->gpu_stream == nullptr || entry->request.device < 0) {
    ctx->SetStatus(tfw::errors::Internal("tfring: cannot get the CUDA stream of ", ctx->device()->name()));
    return false;
  }
#endif
  return true;
}

bool MakeEntry(tfw::OpKernelContext* ctx, int index, const std::string& name, OpType op, bool same_shape,
               TensorEntry* entry) {
  const tfw::Tensor& input = ctx->input(index);
  Request& r = entry->request;
  r.name = name;
  r.op = op;
  if (!FromTF(input.dtype(), &r.dtype)) {
    ctx->SetStatus(tfw::errors::InvalidArgument("tfring: unsupported dtype ", tfw::DataTypeString(input.dtype()),
                                                " for tensor '", name, "'"));
    return false;
  }
  for (int i = 0; i < input.dims(); ++i) r.shape.push_back(input.dim_size(i));
  if (!SetGpuStream(ctx, index, entry)) return false;
  if (same_shape) {
    tfw::Tensor* out = nullptr;
    // Forward the input buffer when TF allows it (nothing else holds it, e.g. a gradient only this op reads):
    // the collective then runs in place, with no output to allocate and no copy. This must come before the
    // entry takes its own reference to the input, or TF sees two holders and never forwards.
    const bool forwarded = ctx->forward_input_to_output_with_shape(index, index, input.shape(), &out) && out;
    TFR_LOG(TFR_TRACE, "tensor '" << name << "': " << (forwarded ? "in place (input forwarded)" : "new output"));
    if (!forwarded) {
      tfw::Status s = AllocateOutputTensor(ctx, index, input.shape(), &out);
      if (!s.ok()) {
        ctx->SetStatus(s);
        return false;
      }
    }
    entry->output = std::make_shared<TFTensor>(*out);
  }
  entry->input = std::make_shared<TFTensor>(input);
  entry->context = std::make_shared<TFOpContext>(ctx);
  entry->output_index = index;
  return true;
}

}  // namespace tf
}  // namespace tfring
