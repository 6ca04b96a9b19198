// XLA lowering of tfring's TensorFlow collectives, for tf.function(jit_compile=True) and Keras' jit_compile (its
// default on a GPU machine). Each op becomes an XLA custom call to tfring's FFI handlers (tfring/cc/xla), which
// hand XLA's buffers to the same core runtime as the graph kernels: the same negotiation, fusion, stall deadline
// and error model. The collective's name is the graph kernel's (tensor_name, else the node name), so the ranks
// match as in graph mode. The "Host" handlers always; the "CUDA" ones (handlers_gpu.cc, device buffers to the
// core's NCCL path) only in NCCL builds, and never run on a GPU.
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../common/ops/layout.h"  // EvenRowCounts: the core's reducescatter/alltoall row split
#include "adapter.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "xla/ffi/api/api.h"
#include "xla/ffi/api/ffi.h"
#include "xla/hlo/builder/xla_builder.h"

// Defined by tfring/cc/xla/handlers.cc, linked into this library.
extern "C" XLA_FFI_Error* tfring_jax_allreduce(XLA_FFI_CallFrame* frame);
extern "C" XLA_FFI_Error* tfring_jax_allgather(XLA_FFI_CallFrame* frame);
extern "C" XLA_FFI_Error* tfring_jax_broadcast(XLA_FFI_CallFrame* frame);
extern "C" XLA_FFI_Error* tfring_jax_alltoall(XLA_FFI_CallFrame* frame);
extern "C" XLA_FFI_Error* tfring_jax_reducescatter(XLA_FFI_CallFrame* frame);

namespace xla {
namespace ffi {
const XLA_FFI_Api* GetXlaFfiApi();  // TensorFlow's XLA (libtensorflow_cc), where handlers are registered
}  // namespace ffi
}  // namespace xla

namespace tfring {
namespace tf_xla {
namespace {

namespace tfw = ::tensorflow;

XLA_FFI_REGISTER_HANDLER(xla::ffi::GetXlaFfiApi(), "tfring_allreduce", "Host", tfring_jax_allreduce);
XLA_FFI_REGISTER_HANDLER(xla::ffi::GetXlaFfiApi(), "tfring_allgather", "Host", tfring_jax_allgather);
XLA_FFI_REGISTER_HANDLER(xla::ffi::GetXlaFfiApi(), "tfring_broadcast", "Host", tfring_jax_broadcast);
XLA_FFI_REGISTER_HANDLER(xla::ffi::GetXlaFfiApi(), "tfring_alltoall", "Host", tfring_jax_alltoall);
XLA_FFI_REGISTER_HANDLER(xla::ffi::GetXlaFfiApi(), "tfring_reducescatter", "Host", tfring_jax_reducescatter);

#ifdef TFRING_HAVE_NCCL
extern "C" XLA_FFI_Error* tfring_jax_gpu_allreduce(XLA_FFI_CallFrame* frame);
extern "C" XLA_FFI_Error* tfring_jax_gpu_allgather(XLA_FFI_CallFrame* frame);
extern "C" XLA_FFI_Error* tfring_jax_gpu_broadcast(XLA_FFI_CallFrame* frame);
extern "C" XLA_FFI_Error* tfring_jax_gpu_alltoall(XLA_FFI_CallFrame* frame);
extern "C" XLA_FFI_Error* tfring_jax_gpu_reducescatter(XLA_FFI_CallFrame* frame);

// Registered explicitly (the macro drops XLA's answer): the outcome is kept for tfring_xla_cuda_registration,
// which the GPU build test reads.
std::string RegisterCudaHandlers() {
  const std::pair<const char*, XLA_FFI_Handler*> handlers[] = {{"tfring_allreduce", tfring_jax_gpu_allreduce},
                                                               {"tfring_allgather", tfring_jax_gpu_allgather},
                                                               {"tfring_broadcast", tfring_jax_gpu_broadcast},
                                                               {"tfring_alltoall", tfring_jax_gpu_alltoall},
                                                               {"tfring_reducescatter", tfring_jax_gpu_reducescatter}};
  const XLA_FFI_Api* api = xla::ffi::GetXlaFfiApi();
  for (const auto& h : handlers) {
    XLA_FFI_Error* err = xla::ffi::Ffi::RegisterStaticHandler(api, h.first, "CUDA", h.second);
    if (err == nullptr) continue;
    XLA_FFI_Error_GetMessage_Args args;
    args.struct_size = XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE;
    args.extension_start = nullptr;
    args.error = err;
    api->XLA_FFI_Error_GetMessage(&args);
    std::string message = std::string(h.first) + ": " + args.message;
    XLA_FFI_Error_Destroy_Args destroy;
    destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
    destroy.extension_start = nullptr;
    destroy.error = err;
    api->XLA_FFI_Error_Destroy(&destroy);
    return message;
  }
  return "";
}
const std::string& CudaRegistration() {
  static const std::string* result = new std::string(RegisterCudaHandlers());
  return *result;
}
[[maybe_unused]] const bool kCudaRegistered = CudaRegistration().empty();  // at load, as the "Host" ones
#endif

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The handlers' attributes, as the MLIR dictionary XLA parses from a typed-FFI custom call's backend config.
class Attrs {
 public:
  Attrs& Str(const char* k, const std::string& v) { return Add(k, Quote(v)); }
  Attrs& Int(const char* k, int64_t v) { return Add(k, std::to_string(v) + " : i64"); }
  Attrs& F64(const char* k, double v) {
    std::ostringstream os;
    os.precision(17);
    os << std::scientific << v << " : f64";
    return Add(k, os.str());
  }
  Attrs& Raw(const char* k, const std::string& v) { return Add(k, v); }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  Attrs& Add(const char* k, const std::string& v) {
    body_ += (body_.empty() ? "" : ", ") + std::string(k) + " = " + v;
    return *this;
  }
  std::string body_;
};

// One custom call over every input; outputs are those of the handler (a tuple when there are several).
void EmitCall(tfw::XlaOpKernelContext* ctx, const char* target, const std::vector<xla::Shape>& shapes,
              const Attrs& attrs, int num_operands = -1) {
  std::vector<xla::XlaOp> inputs;
  for (int i = 0; i < (num_operands < 0 ? ctx->num_inputs() : num_operands); ++i) inputs.push_back(ctx->Input(i));
  xla::Shape shape = shapes.size() == 1 ? shapes[0] : xla::ShapeUtil::MakeTupleShape(shapes);
  xla::XlaOp call =
      xla::CustomCall(ctx->builder(), target, inputs, shape, attrs.str(), /*has_side_effect=*/true,
                      /*output_operand_aliasing=*/{}, /*literal=*/nullptr, xla::CustomCallSchedule::SCHEDULE_NONE,
                      xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
  if (shapes.size() == 1) {
    ctx->SetOutput(0, call);
    return;
  }
  for (size_t i = 0; i < shapes.size(); ++i) ctx->SetOutput(static_cast<int>(i), xla::GetTupleElement(call, i));
}

std::vector<xla::Shape> InputShapes(tfw::XlaOpKernelContext* ctx) {
  std::vector<xla::Shape> shapes;
  for (int i = 0; i < ctx->num_inputs(); ++i) shapes.push_back(ctx->InputXlaShape(i).value());
  return shapes;
}

class XlaCollective : public tfw::XlaOpKernel {
 public:
  explicit XlaCollective(tfw::OpKernelConstruction* c) : XlaOpKernel(c) {
    bool ignore_name_scope = false;
    OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignore_name_scope));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &set_));
    name_ = tfring::tf::TensorName(c, ignore_name_scope);
  }

 protected:
  std::string name_;
  int set_ = 0;
};

// This rank's size and rank in its process set, when compiling (the set must exist and hold this rank).
bool SetShape(tfw::XlaOpKernelContext* ctx, int set, const std::string& name, Topology* t) {
  bool included = false;
  if (Runtime::Get().SetTopology(set, t, &included) && included) return true;
  ctx->SetStatus(tfw::errors::InvalidArgument("tfring: '", name, "' inside compiled code: process set ", set,
                                              " is not registered or this rank is not in it"));
  return false;
}

class XlaAllreduce : public XlaCollective {
 public:
  explicit XlaAllreduce(tfw::OpKernelConstruction* c) : XlaCollective(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }
  void Compile(tfw::XlaOpKernelContext* ctx) override {
    std::vector<xla::Shape> shapes = InputShapes(ctx);
    if (!Shapes(ctx, &shapes)) return;
    Attrs a;
    a.Str("name", name_).Int("reduce_op", op_).F64("prescale", prescale_).F64("postscale", postscale_);
    EmitCall(ctx, target_, shapes, a.Int("process_set", set_));
  }

 protected:
  virtual bool Shapes(tfw::XlaOpKernelContext* ctx, std::vector<xla::Shape>* shapes) { return true; }
  const char* target_ = "tfring_allreduce";
  int op_ = 1;
  float prescale_ = 1.0f, postscale_ = 1.0f;
};

class XlaBroadcast : public XlaCollective {
 public:
  explicit XlaBroadcast(tfw::OpKernelConstruction* c) : XlaCollective(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
  }
  void Compile(tfw::XlaOpKernelContext* ctx) override {
    Attrs a;
    EmitCall(ctx, "tfring_broadcast", InputShapes(ctx),
             a.Str("name", name_).Int("root_rank", root_).Int("process_set", set_));
  }

 private:
  int root_ = 0;
};

// Inside compiled code the result's shape is fixed when compiling: every rank of the set is assumed to send as
// many rows as this one (as tfring.jax without sizes=). A rank whose peers send other counts fails with an error
// naming both shapes instead of reading past a buffer; eager and graph mode allow any counts.
class XlaAllgather : public XlaCollective {
 public:
  explicit XlaAllgather(tfw::OpKernelConstruction* c) : XlaCollective(c) {}
  void Compile(tfw::XlaOpKernelContext* ctx) override {
    Topology t;
    bool included = false;
    OP_REQUIRES(ctx, Runtime::Get().SetTopology(set_, &t, &included) && included,
                tfw::errors::InvalidArgument("tfring: allgather '", name_, "' inside compiled code: process set ", set_,
                                             " is not registered or this rank is not in it"));
    std::vector<xla::Shape> shapes = InputShapes(ctx);
    for (auto& s : shapes) {
      OP_REQUIRES(ctx, s.dimensions().size() > 0,
                  tfw::errors::InvalidArgument("tfring: allgather '", name_, "' of a scalar: it needs a dimension"));
      s.set_dimensions(0, s.dimensions(0) * t.size);
    }
    Attrs a;
    EmitCall(ctx, "tfring_allgather", shapes, a.Str("name", name_).Int("process_set", set_));
  }
};

// Rank i of the set gets the i-th block of rows (the first ranks one more), as the core's reducescatter.
class XlaReducescatter : public XlaAllreduce {
 public:
  explicit XlaReducescatter(tfw::OpKernelConstruction* c) : XlaAllreduce(c) { target_ = "tfring_reducescatter"; }

 protected:
  bool Shapes(tfw::XlaOpKernelContext* ctx, std::vector<xla::Shape>* shapes) override {
    Topology t;
    if (!SetShape(ctx, set_, name_, &t)) return false;
    for (auto& s : *shapes) {
      if (s.dimensions().size() == 0) {
        ctx->SetStatus(tfw::errors::InvalidArgument("tfring: reducescatter '", name_, "' of a scalar"));
        return false;
      }
      s.set_dimensions(0, EvenRowCounts(s.dimensions(0), t.size)[t.rank]);
    }
    return true;
  }
};

// The splits must be a compile-time constant (empty: even). Each rank is assumed to receive from every rank as
// many rows as it sends itself (true for even splits of equal shapes); a rank for which that is wrong fails with
// both shapes named, as allgather.
class XlaAlltoall : public XlaCollective {
 public:
  explicit XlaAlltoall(tfw::OpKernelConstruction* c) : XlaCollective(c) {}
  void Compile(tfw::XlaOpKernelContext* ctx) override {
    Topology t;
    if (!SetShape(ctx, set_, name_, &t)) return;
    std::vector<int64_t> splits;
    OP_REQUIRES_OK(ctx, ctx->ConstantInputAsIntVector(1, &splits));
    xla::Shape shape = ctx->InputXlaShape(0).value();
    OP_REQUIRES(ctx, shape.dimensions().size() > 0,
                tfw::errors::InvalidArgument("tfring: alltoall '", name_, "' of a scalar"));
    if (splits.empty()) splits = EvenRowCounts(shape.dimensions(0), t.size);
    OP_REQUIRES(ctx, static_cast<int>(splits.size()) == t.size,
                tfw::errors::InvalidArgument("tfring: alltoall '", name_, "': ", splits.size(), " splits for a set of ",
                                             t.size, " ranks"));
    shape.set_dimensions(0, splits[t.rank] * t.size);
    xla::Shape received = xla::ShapeUtil::MakeShape(xla::S32, {t.size});
    std::string list;
    for (int64_t v : splits) list += (list.empty() ? "" : ", ") + std::to_string(v);
    Attrs a;
    a.Str("name", name_).Raw("splits", "array<i64: " + list + ">").Int("process_set", set_);
    EmitCall(ctx, "tfring_alltoall", {shape, received}, a, /*num_operands=*/1);
  }
};

REGISTER_XLA_OP(Name("HorovodAllreduce"), XlaAllreduce);
REGISTER_XLA_OP(Name("HorovodReducescatter"), XlaReducescatter);
REGISTER_XLA_OP(Name("HorovodGroupedReducescatter"), XlaReducescatter);
REGISTER_XLA_OP(Name("HorovodAlltoall").CompileTimeConstantInput("splits"), XlaAlltoall);
REGISTER_XLA_OP(Name("HorovodAllgather"), XlaAllgather);
REGISTER_XLA_OP(Name("HorovodGroupedAllgather"), XlaAllgather);
REGISTER_XLA_OP(Name("HorovodGroupedAllreduce"), XlaAllreduce);
REGISTER_XLA_OP(Name("HorovodBroadcast"), XlaBroadcast);

}  // namespace
}  // namespace tf_xla
}  // namespace tfring

#ifdef TFRING_HAVE_NCCL
// "" when TensorFlow's XLA took the "CUDA" handlers, else its error.
extern "C" const char* tfring_xla_cuda_registration() { return tfring::tf_xla::CudaRegistration().c_str(); }
#endif
