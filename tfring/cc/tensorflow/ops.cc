// Op registrations under Horovod's names and attrs, so graphs built for Horovod run on tfring.
// Extra attr (not in Horovod, defaulted so Horovod graphs still load): tensor_name, the negotiation name
// in eager mode, where TF gives every kernel its op type as node name.
// Every collective is stateful: TF must never constant-fold or prune it, or it would run at
// graph-optimization time on one rank only.
#include <string>
#include <vector>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfw = ::tensorflow;
using tfw::shape_inference::InferenceContext;
using tfw::shape_inference::ShapeHandle;

#define TFR_NUMERIC "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float32, float64}"
#define TFR_ANY "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float32, float64, bool}"

namespace {

// Output of unknown first dimension and the input's trailing dimensions (scalars become vectors).
absl::Status UnknownFirstDim(InferenceContext* c, int input, int output) {
  ShapeHandle in = c->input(input);
  if (!c->RankKnown(in)) {
    c->set_output(output, c->UnknownShape());
    return absl::OkStatus();
  }
  if (c->Rank(in) == 0) {
    c->set_output(output, c->Vector(InferenceContext::kUnknownDim));
    return absl::OkStatus();
  }
  ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
  c->set_output(output, out);
  return absl::OkStatus();
}

absl::Status SameAsInputs(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

absl::Status GatherLike(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) TF_RETURN_IF_ERROR(UnknownFirstDim(c, i, i));
  return absl::OkStatus();
}

// A Horovod collective over T: its own attrs, the naming attrs, (grouped: on num_tensors tensors) num_tensors, and
// process_set_id, in Horovod's order; then its input and output. Registered as REGISTER_OP registers a builder.
void RegisterCollective(const std::string& name, const char* types, std::vector<std::string> attrs, bool grouped,
                        const std::string& output, tfw::OpShapeInferenceFn shape_fn) {
  tfw::OpDefBuilder b(name);
  b.Attr(std::string("T: ") + types);
  for (auto& a : attrs) b.Attr(std::move(a));
  b.Attr("ignore_name_scope: bool = False").Attr("tensor_name: string = ''");
  if (grouped) b.Attr("num_tensors: int");
  b.Attr("process_set_id: int = 0").Input(grouped ? "tensors: num_tensors*T" : "tensor: T");
  b.Output(output + (grouped ? ": num_tensors*T" : ": T")).SetIsStateful().SetShapeFn(std::move(shape_fn));
  tfw::OpRegistry::Global()->Register([b](tfw::OpRegistrationData* data) { return b.Finalize(data); });
}

// Horovod registers each of these twice: on one tensor, and as HorovodGrouped<Op> on num_tensors of them.
void RegisterWithGrouped(const std::string& op, const char* types, const std::vector<std::string>& attrs,
                         const std::string& output, tfw::OpShapeInferenceFn shape_fn) {
  RegisterCollective("Horovod" + op, types, attrs, false, output, shape_fn);
  RegisterCollective("HorovodGrouped" + op, types, attrs, true, output, shape_fn);
}

[[maybe_unused]] const bool kCollectivesRegistered = [] {
  RegisterWithGrouped("Allreduce", TFR_NUMERIC, {"reduce_op: int", "prescale_factor: float", "postscale_factor: float"},
                      "sum", SameAsInputs);
  RegisterWithGrouped("Allgather", TFR_ANY, {}, "output", GatherLike);
  RegisterCollective("HorovodBroadcast", TFR_ANY, {"root_rank: int"}, false, "output", SameAsInputs);
  RegisterWithGrouped("Reducescatter", TFR_NUMERIC,
                      {"reduce_op: int", "prescale_factor: float = 1.0", "postscale_factor: float = 1.0"}, "output",
                      GatherLike);
  return true;
}();

}  // namespace

REGISTER_OP("HorovodAlltoall")
    .Attr("T: " TFR_ANY)
    .Attr("ignore_name_scope: bool = False")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(UnknownFirstDim(c, 0, 0));
      c->set_output(1, c->Vector(InferenceContext::kUnknownDim));
      return absl::OkStatus();
    });

REGISTER_OP("HorovodJoin")
    .Attr("process_set_id: int = 0")
    .Output("output: int32")
    .SetIsStateful()
    .SetShapeFn(tfw::shape_inference::ScalarShape);

REGISTER_OP("HorovodBarrier")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(tfw::shape_inference::NoOutputs);

#define TFR_SCALAR_OP(name)            \
  REGISTER_OP(name)                    \
      .Attr("process_set_id: int = 0") \
      .Output("output: int32")         \
      .SetIsStateful()                 \
      .SetShapeFn(tfw::shape_inference::ScalarShape)

TFR_SCALAR_OP("HorovodSize");
TFR_SCALAR_OP("HorovodLocalSize");
TFR_SCALAR_OP("HorovodRank");
TFR_SCALAR_OP("HorovodLocalRank");
TFR_SCALAR_OP("HorovodProcessSetIncluded");
