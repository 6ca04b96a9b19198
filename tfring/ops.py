"""Python wrappers over the C++ collective ops (Horovod's signatures) and their gradients."""
import contextlib
import re

import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

from tfring import _graph_order, _lib  # noqa: F401 (_graph_order: on import)
from tfring.basics import rank, size
from tfring.compression import Compression
from tfring.process_sets import _temp_process_set_object, process_set_id_of

Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_OP_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}


class ReduceOp:
    AVERAGE, SUM, ADASUM, MIN, MAX, PRODUCT = Average, Sum, Adasum, Min, Max, Product


_NUMERIC = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
            tf.float64)
_ANY = _NUMERIC + (tf.bool,)


def _ops():
    return _lib.load()[0]


def _normalize_name(name):
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _names(prefix, tensor, name):
    """Keyword args naming the collective. Graph mode: the node name (derived from the input when not
    given, identical on every rank). Eager mode: TF names every kernel by its op type, so a given name
    travels in the tensor_name attr; unnamed eager ops share the op type name (one in flight per thread)."""
    if tf.executing_eagerly():
        return {"tensor_name": name or ""}
    if name is None:
        name = "%s_%s" % (prefix, _normalize_name(tensor.name))
    return {"name": name}


def _require_init(fn):
    """Eager calls fail in Python with a plain message; graph-mode calls fail in the kernel."""
    if tf.executing_eagerly():
        from tfring.basics import is_initialized
        if not is_initialized():
            raise ValueError("tfring.%s: tfring has not been initialized (or was shut down); call tfring.init() "
                             "first" % fn)


def _check_dtype(fn, tensor, allowed):
    _require_init(fn)
    if tensor.dtype not in allowed:
        raise TypeError("tfring.%s: tensor dtype %s is not supported; supported: %s"
                        % (fn, tensor.dtype.name, ", ".join(d.name for d in allowed)))


def _check_op(fn, op, adasum=False):
    if op == Adasum and adasum:
        return
    if op not in _OP_NAMES:
        raise ValueError("tfring.%s: op=%r is not supported; use Average, Sum, Min, Max or Product%s"
                         % (fn, op, " (or Adasum)" if adasum else ""))


def _check_adasum(fn, pid):
    """Adasum runs on CPU over a power-of-two number of ranks (recursive doubling); refuse others up front."""
    n = _set_size(pid)
    if n & (n - 1):
        raise NotImplementedError("tfring.%s: op=Adasum needs a power-of-two number of ranks in the process set, "
                                  "got %d" % (fn, n))


def _set_id(fn, process_set):
    """process_set_id attr of a `process_set=` argument; ValueError if it names no registered set."""
    return process_set_id_of(process_set, fn)


def _set_size(process_set_id):
    return size() if process_set_id == 0 else _temp_process_set_object(process_set_id).size()


def _set_rank(process_set_id):
    return rank() if process_set_id == 0 else _temp_process_set_object(process_set_id).rank()


def check_num_rank_power_of_2(num_rank):
    """Horovod's helper: is num_rank a power of two (Adasum's requirement)?"""
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def handle_average_backwards_compatibility(op, average):
    """Horovod's helper: the reduce op meant by `op` and the deprecated `average` flag."""
    return _resolve_op("allreduce", op, average)


def _resolve_op(fn, op, average):
    if average is not None:
        if op is not None:
            raise ValueError("tfring.%s: pass either op or the deprecated average, not both" % fn)
        op = Average if average else Sum
    op = Average if op is None else op
    _check_op(fn, op, adasum=True)
    return op


def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0, ignore_name_scope=False,
               process_set_id=0):
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype("allreduce", tensor, _NUMERIC)
    return _ops().horovod_allreduce(tensor, reduce_op=op, prescale_factor=prescale_factor,
                                    postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                                    process_set_id=process_set_id, **_names("HorovodAllreduce", tensor, name))


def _on(device):
    """Horovod's device_dense/device_sparse: place the collective there (GPU builds run it on that GPU)."""
    return tf.device(device) if device else contextlib.nullcontext()


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=None, ignore_name_scope=False):
    """Reduces `tensor` over all ranks (default Average). tf.IndexedSlices are allgathered, as in Horovod."""
    op = _resolve_op("allreduce", op, average)
    pid = _set_id("allreduce", process_set)
    if op == Adasum:
        if isinstance(tensor, tf.IndexedSlices):
            raise NotImplementedError("tfring.allreduce: Adasum does not support tf.IndexedSlices; pass dense "
                                      "gradients (sparse_as_dense=True)")
        _check_adasum("allreduce", pid)
    if isinstance(tensor, tf.IndexedSlices):
        if op not in (Average, Sum):
            raise NotImplementedError("tfring.allreduce: op=%s is not supported for tf.IndexedSlices (only Average "
                                      "and Sum: sparse values are allgathered)" % _OP_NAMES.get(op, op))
        if prescale_factor != 1.0 or postscale_factor != 1.0:
            raise NotImplementedError("tfring.allreduce: prescale_factor=%r / postscale_factor=%r are not supported "
                                      "for tf.IndexedSlices" % (prescale_factor, postscale_factor))
        with _on(device_sparse):
            values = allgather(tensor.values, name=None if name is None else name + "_values", process_set=process_set)
            indices = allgather(tensor.indices, name=None if name is None else name + "_indices",
                                process_set=process_set)
        if op == Average:  # true division, as Horovod: integer values become floats
            values = values / tf.cast(_set_size(pid), values.dtype) if values.dtype.is_floating \
                else tf.math.truediv(values, _set_size(pid))
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    with _on(device_dense):
        reduced = _allreduce(compressed, name=name, op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                             process_set_id=pid)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=None,
                      ignore_name_scope=False):
    """Allreduces a list of tensors negotiated and fused together (one op per dtype)."""
    op = _resolve_op("grouped_allreduce", op, average)
    pid = _set_id("grouped_allreduce", process_set)
    if op == Adasum:
        _check_adasum("grouped_allreduce", pid)
    tensors = list(tensors)
    if not tensors:
        return []
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        return [allreduce(t, op=op, compression=compression, prescale_factor=prescale_factor,
                          device_dense=device_dense, device_sparse=device_sparse, process_set=process_set,
                          postscale_factor=postscale_factor, name=None if name is None else "%s_%d" % (name, i))
                for i, t in enumerate(tensors)]
    compressed = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    results = [None] * len(tensors)
    by_dtype = {}
    for i, (t, _) in enumerate(compressed):
        _check_dtype("grouped_allreduce", t, _NUMERIC)
        by_dtype.setdefault(t.dtype, []).append(i)
    for dtype, idx in by_dtype.items():
        group = [compressed[i][0] for i in idx]
        group_name = name if name is None or len(by_dtype) == 1 else "%s_%s" % (name, dtype.name)
        with _on(device_dense):
            out = _ops().horovod_grouped_allreduce(group, reduce_op=op, prescale_factor=prescale_factor,
                                                   postscale_factor=postscale_factor,
                                                   ignore_name_scope=ignore_name_scope, process_set_id=pid,
                                                   **_names("HorovodGroupedAllreduce", group[0], group_name))
        for i, r in zip(idx, out):
            results[i] = compression.decompress(r, compressed[i][1])
    return results


def allgather(tensor, name=None, process_set=None, ignore_name_scope=False):
    """Concatenates every rank's tensor along dim 0 (first dimensions may differ; scalars become vectors)."""
    pid = _set_id("allgather", process_set)
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype("allgather", tensor, _ANY)
    return _ops().horovod_allgather(tensor, ignore_name_scope=ignore_name_scope, process_set_id=pid,
                                    **_names("HorovodAllgather", tensor, name))


def grouped_allgather(tensors, name=None, process_set=None, ignore_name_scope=False):
    pid = _set_id("grouped_allgather", process_set)
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    for t in tensors:
        _check_dtype("grouped_allgather", t, _ANY)
    if len({t.dtype for t in tensors}) > 1:
        return [allgather(t, name=None if name is None else "%s_%d" % (name, i), process_set=process_set)
                for i, t in enumerate(tensors)]
    return _ops().horovod_grouped_allgather(tensors, ignore_name_scope=ignore_name_scope, process_set_id=pid,
                                            **_names("HorovodGroupedAllgather", tensors[0], name))


def broadcast(tensor, root_rank, name=None, process_set=None, ignore_name_scope=False):
    """Every rank receives root_rank's tensor."""
    pid = _set_id("broadcast", process_set)
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise TypeError("tfring.broadcast: root_rank must be an int, got %r" % (root_rank,))
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype("broadcast", tensor, _ANY)
    return _ops().horovod_broadcast(tensor, root_rank=root_rank, ignore_name_scope=ignore_name_scope,
                                    process_set_id=pid, **_names("HorovodBroadcast", tensor, name))


def alltoall(tensor, splits=None, name=None, process_set=None, ignore_name_scope=False):
    """Sends splits[i] rows of `tensor` to rank i of the set. Returns the received rows, and with `splits` given
    also received_splits (rows from each rank), as Horovod."""
    pid = _set_id("alltoall", process_set)
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype("alltoall", tensor, _ANY)
    splits_t = tf.zeros([0], tf.int32) if splits is None else tf.cast(tf.convert_to_tensor(splits), tf.int32)
    out, received = _ops().horovod_alltoall(tensor, splits_t, ignore_name_scope=ignore_name_scope,
                                            process_set_id=pid, **_names("HorovodAlltoall", tensor, name))
    return out if splits is None else (out, received)


def reducescatter(tensor, op=Average, name=None, process_set=None, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over ranks and gives rank i the i-th block of dim 0 (first dim % size ranks get one more row)."""
    pid = _set_id("reducescatter", process_set)
    _check_op("reducescatter", op)
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype("reducescatter", tensor, _NUMERIC)
    return _ops().horovod_reducescatter(tensor, reduce_op=op, prescale_factor=prescale_factor,
                                        postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                                        process_set_id=pid, **_names("HorovodReducescatter", tensor, name))


def grouped_reducescatter(tensors, op=Average, name=None, process_set=None, ignore_name_scope=False,
                          prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of a list, negotiated together (one op per dtype)."""
    pid = _set_id("grouped_reducescatter", process_set)
    _check_op("grouped_reducescatter", op)
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    for t in tensors:
        _check_dtype("grouped_reducescatter", t, _NUMERIC)
    if len({t.dtype for t in tensors}) > 1:
        return [reducescatter(t, op=op, name=None if name is None else "%s_%d" % (name, i),
                              prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                              ignore_name_scope=ignore_name_scope, process_set=process_set)
                for i, t in enumerate(tensors)]
    return _ops().horovod_grouped_reducescatter(tensors, reduce_op=op, prescale_factor=prescale_factor,
                                                postscale_factor=postscale_factor,
                                                ignore_name_scope=ignore_name_scope, process_set_id=pid,
                                                **_names("HorovodGroupedReducescatter", tensors[0], name))


def join(process_set=None):
    """Marks this rank as done with its data; it contributes zeros to allreduces until every rank has
    joined. Returns the rank that joined last."""
    _require_init("join")
    result = _ops().horovod_join(process_set_id=_set_id("join", process_set))
    return int(result) if tf.executing_eagerly() else result


def barrier(process_set=None):
    _require_init("barrier")
    return _ops().horovod_barrier(process_set_id=_set_id("barrier", process_set))


def size_op(process_set_id=0, name=None):
    return _ops().horovod_size(process_set_id=process_set_id, name=name)


def rank_op(process_set_id=0, name=None):
    return _ops().horovod_rank(process_set_id=process_set_id, name=name)


def local_size_op(process_set_id=0, name=None):
    return _ops().horovod_local_size(process_set_id=process_set_id, name=name)


def local_rank_op(process_set_id=0, name=None):
    return _ops().horovod_local_rank(process_set_id=process_set_id, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank is in the process set, else 0."""
    return _ops().horovod_process_set_included(process_set_id=process_set_id, name=name)


# ---- gradients -------------------------------------------------------------------------------------

def _grad_name(op, suffix="grad"):
    """Gradient collectives are named after the forward op in graphs; eager ones run one at a time."""
    if tf.executing_eagerly():
        return {}
    # Tape gradients inside tf.function get a mock op without a name; its output tensor has one.
    base = getattr(op, "name", None) or op.outputs[0].name
    return {"name": "%s_%s" % (_normalize_name(base), suffix)}


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
        return None, lambda gs, names: _ops().horovod_grouped_allreduce(
            gs, reduce_op=reduce_op, prescale_factor=pre, postscale_factor=post, **attrs, **names)
    if reduce_op in (Min, Max):
        return reduce_op, lambda gs, names: _ops().horovod_grouped_allreduce(
            gs, reduce_op=Sum, prescale_factor=1.0, postscale_factor=1.0, **attrs, **names)
    raise NotImplementedError("tfring: the gradient of allreduce with op=%s is not implemented"
                              % _OP_NAMES.get(reduce_op, reduce_op))


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
        grad = _ops().horovod_allreduce(grad, reduce_op=Average, prescale_factor=1.0, postscale_factor=1.0,
                                        **attrs, **_grad_name(op, "grad_%d" % i))
        rows = tf.shape(x)[:1] if x.shape.rank != 0 else tf.ones([1], tf.int32)
        all_rows = _ops().horovod_allgather(rows, **attrs, **_grad_name(op, "grad_rows_%d" % i))
        me = _set_rank(pid)
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
    reduced = _ops().horovod_allreduce(grad, reduce_op=Average, prescale_factor=1.0, postscale_factor=1.0,
                                       **_attrs(op), **_grad_name(op))
    if rank() != op.get_attr("root_rank"):  # root_rank is a global rank, also in a process set
        return reduced * 0  # not zeros_like: a constant would let graph mode prune the allreduce (a hang)
    return reduced


@tf_ops.RegisterGradient("HorovodAlltoall")
def _alltoall_grad(op, grad, grad_splits=None):
    back, _ = _ops().horovod_alltoall(grad, op.outputs[1], **_attrs(op), **_grad_name(op))
    return back, None


def _scatter_grad(op, grad, i=0):
    """Horovod's convention (the grads of a Sum are scaled by the set size, an Average's are not, scale factors
    apply): every rank's block grad, gathered."""
    reduce_op = op.get_attr("reduce_op")
    if reduce_op not in (Sum, Average):
        raise NotImplementedError("tfring: the gradient of reducescatter is only implemented for Sum and Average")
    attrs = _attrs(op)
    pre, post = _scales(op)
    scale = pre * post * (_set_size(attrs["process_set_id"]) if reduce_op == Sum else 1)
    gathered = _ops().horovod_allgather(grad, **attrs, **_grad_name(op, "grad_%d" % i))
    return gathered * tf.cast(scale, gathered.dtype) if scale != 1.0 else gathered


@tf_ops.RegisterGradient("HorovodReducescatter")
def _reducescatter_grad(op, grad):
    return _scatter_grad(op, grad)


@tf_ops.RegisterGradient("HorovodGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    return [_scatter_grad(op, g, i) for i, g in enumerate(grads)]
