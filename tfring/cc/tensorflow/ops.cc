// Op registrations under Horovod's names and attrs, so graphs built for Horovod run on tfring.
// Extra attr (not in Horovod, defaulted so Horovod graphs still load): tensor_name, the negotiation name
// in eager mode, where TF gives every kernel its op type as node name.
// Every collective is stateful: TF must never constant-fold or prune it, or it would run at
// graph-optimization time on one rank only.
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

}  // namespace

REGISTER_OP("HorovodAllreduce")
    .Attr("T: " TFR_NUMERIC)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float")
    .Attr("postscale_factor: float")
    .Attr("ignore_name_scope: bool = False")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("sum: T")
    .SetIsStateful()
    .SetShapeFn(SameAsInputs);

REGISTER_OP("HorovodGroupedAllreduce")
    .Attr("T: " TFR_NUMERIC)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float")
    .Attr("postscale_factor: float")
    .Attr("ignore_name_scope: bool = False")
    .Attr("tensor_name: string = ''")
    .Attr("num_tensors: int")
    .Attr("process_set_id: int = 0")
    .Input("tensors: num_tensors*T")
    .Output("sum: num_tensors*T")
    .SetIsStateful()
    .SetShapeFn(SameAsInputs);

REGISTER_OP("HorovodAllgather")
    .Attr("T: " TFR_ANY)
    .Attr("ignore_name_scope: bool = False")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(GatherLike);

REGISTER_OP("HorovodGroupedAllgather")
    .Attr("T: " TFR_ANY)
    .Attr("ignore_name_scope: bool = False")
    .Attr("tensor_name: string = ''")
    .Attr("num_tensors: int")
    .Attr("process_set_id: int = 0")
    .Input("tensors: num_tensors*T")
    .Output("output: num_tensors*T")
    .SetIsStateful()
    .SetShapeFn(GatherLike);

REGISTER_OP("HorovodBroadcast")
    .Attr("T: " TFR_ANY)
    .Attr("root_rank: int")
    .Attr("ignore_name_scope: bool = False")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(SameAsInputs);

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

REGISTER_OP("HorovodReducescatter")
    .Attr("T: " TFR_NUMERIC)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("ignore_name_scope: bool = False")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(GatherLike);

REGISTER_OP("HorovodGroupedReducescatter")
    .Attr("T: " TFR_NUMERIC)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("ignore_name_scope: bool = False")
    .Attr("tensor_name: string = ''")
    .Attr("num_tensors: int")
    .Attr("process_set_id: int = 0")
    .Input("tensors: num_tensors*T")
    .Output("output: num_tensors*T")
    .SetIsStateful()
    .SetShapeFn(GatherLike);

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
