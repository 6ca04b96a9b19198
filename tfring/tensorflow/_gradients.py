"""Gradients of tfring's collectives, registered with TensorFlow on import (the package tfring.tensorflow imports
this module):
allreduce -> allreduce of the upstream gradient, allgather -> this rank's slice of the averaged gradient (as
Horovod), broadcast -> the sum at the root, alltoall -> the reverse alltoall, reducescatter -> allgather."""
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

from tfring.common.basics import rank
from tfring.common.reduce_ops import NAMES as OP_NAMES, Average, Max, Min, Sum
from tfring.tensorflow._handles import normalize_name, ops, set_rank, set_size


def _grad_name(op, suffix="grad"):
    """Gradient collectives are named after the forward op in graphs; eager ones run one at a time."""
    if tf.executing_eagerly():
        return {}
    # Tape gradients inside tf.function get a mock op without a name; its output tensor has one.
    base = getattr(op, "name", None) or op.outputs[0].name
    return {"name": "%s_%s" % (normalize_name(base), suffix)}


def _scales(op):
    return op.get_attr("prescale_factor"), op.get_attr("postscale_factor")


def _attrs(op):
    """The forward op's process set and name-scope handling, which its gradient collectives keep."""
    return {"process_set_id": op.get_attr("process_set_id"), "ignore_name_scope": op.get_attr("ignore_name_scope")}


def _reduce_grad(op, grads):
    """d/dx of y = reduce(x over ranks): Sum/Average send every rank's output grad back through the same
    reduction (as Horovod); Min/Max route the summed grad to the ranks whose value won (Horovod reduces the
    grads with Min/Max, which is not a gradient; documented in docs/horovod-differences.md)."""
    reduce_op = op.get_attr("reduce_op")
    pre, post = _scales(op)
    attrs = _attrs(op)
    if reduce_op in (Sum, Average):
        return None, lambda gs, names: ops().horovod_grouped_allreduce(
            gs, reduce_op=reduce_op, prescale_factor=pre, postscale_factor=post, **attrs, **names)
    if reduce_op in (Min, Max):
        return reduce_op, lambda gs, names: ops().horovod_grouped_allreduce(
            gs, reduce_op=Sum, prescale_factor=1.0, postscale_factor=1.0, **attrs, **names)
    raise NotImplementedError("tfring: the gradient of allreduce with op=%s is not implemented"
                              % OP_NAMES.get(reduce_op, reduce_op))


@tf_ops.RegisterGradient("HorovodAllreduce")
@tf_ops.RegisterGradient("HorovodGroupedAllreduce")
def _allreduce_grad(op, *grads):
    masked, reduce = _reduce_grad(op, grads)
    grads = [tf.zeros_like(o) if g is None else g for g, o in zip(grads, op.outputs)]
    out = reduce(list(grads), _grad_name(op))
    if masked is not None:
        out = [g * tf.cast(tf.equal(x, y), g.dtype) for g, x, y in zip(out, op.inputs, op.outputs)]
    return out


def _gather_grads(op, grads):
    """y = concat over the set's ranks (Horovod's convention: the upstream grads are averaged over the ranks);
    this rank's x gets its own rows of that average."""
    attrs = _attrs(op)
    pid = attrs["process_set_id"]
    out = []
    for i, (x, grad) in enumerate(zip(op.inputs, grads)):
        grad = tf.zeros_like(op.outputs[i]) if grad is None else grad
        grad = ops().horovod_allreduce(grad, reduce_op=Average, prescale_factor=1.0, postscale_factor=1.0,
                                       **attrs, **_grad_name(op, "grad_%d" % i))
        rows = tf.shape(x)[:1] if x.shape.rank != 0 else tf.ones([1], tf.int32)
        all_rows = ops().horovod_allgather(rows, **attrs, **_grad_name(op, "grad_rows_%d" % i))
        me = set_rank(pid)
        offset = tf.reduce_sum(all_rows[:me])
        out.append(tf.reshape(grad[offset:offset + all_rows[me]], tf.shape(x)))
    return out


@tf_ops.RegisterGradient("HorovodAllgather")
def _allgather_grad(op, grad):
    return _gather_grads(op, [grad])[0]


@tf_ops.RegisterGradient("HorovodGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    return _gather_grads(op, grads)


@tf_ops.RegisterGradient("HorovodBroadcast")
def _broadcast_grad(op, grad):
    """y = x_root on every rank: the root's x gets the grads averaged over the set's ranks (Horovod), others 0."""
    reduced = ops().horovod_allreduce(grad, reduce_op=Average, prescale_factor=1.0, postscale_factor=1.0,
                                      **_attrs(op), **_grad_name(op))
    if rank() != op.get_attr("root_rank"):  # root_rank is a global rank, also in a process set
        return reduced * 0  # not zeros_like: a constant would let graph mode prune the allreduce (a hang)
    return reduced


@tf_ops.RegisterGradient("HorovodAlltoall")
def _alltoall_grad(op, grad, grad_splits=None):
    back, _ = ops().horovod_alltoall(grad, op.outputs[1], **_attrs(op), **_grad_name(op))
    return back, None


def _scatter_grad(op, grad, i=0):
    """Horovod's convention (the grads of a Sum are scaled by the set size, an Average's are not, scale factors
    apply): every rank's block grad, gathered."""
    reduce_op = op.get_attr("reduce_op")
    if reduce_op not in (Sum, Average):
        raise NotImplementedError("tfring: the gradient of reducescatter is only implemented for Sum and Average")
    attrs = _attrs(op)
    pre, post = _scales(op)
    scale = pre * post * (set_size(attrs["process_set_id"]) if reduce_op == Sum else 1)
    gathered = ops().horovod_allgather(grad, **attrs, **_grad_name(op, "grad_%d" % i))
    return gathered * tf.cast(scale, gathered.dtype) if scale != 1.0 else gathered


@tf_ops.RegisterGradient("HorovodReducescatter")
def _reducescatter_grad(op, grad):
    return _scatter_grad(op, grad)


@tf_ops.RegisterGradient("HorovodGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    return [_scatter_grad(op, g, i) for i, g in enumerate(grads)]
