"""tfring.tensorflow's allreduce and grouped_allreduce (Horovod's signatures; their gradients: _gradients)."""
import tensorflow as tf

from tfring.common.reduce_ops import NAMES as OP_NAMES, Adasum, Average, Sum, check_adasum, resolve_op
from tfring.tensorflow import _handles as _h, _labels
from tfring.tensorflow._gather import allgather
from tfring.tensorflow.compression import Compression


def allreduce_tensor(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0, ignore_name_scope=False,
                     process_set_id=0):
    tensor = tf.convert_to_tensor(tensor)
    _h.check_dtype("allreduce", tensor, _h.NUMERIC)
    _labels.register("HorovodAllreduce", None, name, ignore_name_scope, _labels.current())  # eager: before
    out = _h.ops().horovod_allreduce(tensor, reduce_op=op, prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                                     process_set_id=process_set_id, **_h.names("HorovodAllreduce", tensor, name))
    _labels.register("HorovodAllreduce", out, name, ignore_name_scope, _labels.current())  # graph: after
    return out


@_h.shared_docs
def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=None, ignore_name_scope=False):
    """Reduces `tensor` over the ranks of `process_set`; every rank receives the result.

    A `tf.IndexedSlices` is allgathered instead, as in Horovod. Integer `Average` truncates toward zero.

    Args:
        tensor: a tensor (or value convertible to one) of a numeric dtype, or a `tf.IndexedSlices`.
        {reduce_args}
        {collective_args}

    Returns:
        A tensor of `tensor`'s shape and dtype (a `tf.IndexedSlices` for one).

    Raises:
        ValueError: `op` is unknown, both `op` and `average` are given, `process_set` is not registered, or
            tfring is not initialized.
        TypeError: the dtype is not supported.
        NotImplementedError: Adasum on a set whose size is not a power of two or on `tf.IndexedSlices`;
            Min/Max/Product or scale factors with `tf.IndexedSlices`.
        tf.errors.FailedPreconditionError: the ranks disagree on shape, dtype, op or scale factors.
    """
    op = resolve_op("allreduce", op, average)
    pid = _h.set_id("allreduce", process_set)
    if op == Adasum:
        if isinstance(tensor, tf.IndexedSlices):
            raise NotImplementedError("tfring.allreduce: Adasum does not support tf.IndexedSlices; pass dense "
                                      "gradients (sparse_as_dense=True)")
        check_adasum("allreduce", _h.set_size(pid))
    if isinstance(tensor, tf.IndexedSlices):
        if op not in (Average, Sum):
            raise NotImplementedError("tfring.allreduce: op=%s is not supported for tf.IndexedSlices (only Average "
                                      "and Sum: sparse values are allgathered)" % OP_NAMES.get(op, op))
        if prescale_factor != 1.0 or postscale_factor != 1.0:
            raise NotImplementedError("tfring.allreduce: prescale_factor=%r / postscale_factor=%r are not supported "
                                      "for tf.IndexedSlices" % (prescale_factor, postscale_factor))
        with _h.on(device_sparse):
            values = allgather(tensor.values, name=None if name is None else name + "_values", process_set=process_set)
            indices = allgather(tensor.indices, name=None if name is None else name + "_indices",
                                process_set=process_set)
        if op == Average:  # true division, as Horovod: integer values become floats
            values = values / tf.cast(_h.set_size(pid), values.dtype) if values.dtype.is_floating \
                else tf.math.truediv(values, _h.set_size(pid))
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    with _h.on(device_dense):
        reduced = allreduce_tensor(compressed, name=name, op=op, prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                                   process_set_id=pid)
    return compression.decompress(reduced, ctx)


@_h.shared_docs
def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=None,
                      ignore_name_scope=False):
    """Allreduces a list of tensors in one negotiation, fused together (one op per dtype).

    Args:
        tensors: a list of tensors; a `tf.IndexedSlices` among them makes every element an `allreduce`.
        {reduce_args}
        {collective_args}

    Returns:
        list: the reduced tensors, in the order of `tensors`.

    Raises:
        ValueError: `op` is unknown, both `op` and `average` are given, `process_set` is not registered, or
            tfring is not initialized.
        TypeError: a dtype is not supported.
        NotImplementedError: Adasum on a set whose size is not a power of two.
        tf.errors.FailedPreconditionError: the ranks disagree on the tensors.
    """
    op = resolve_op("grouped_allreduce", op, average)
    pid = _h.set_id("grouped_allreduce", process_set)
    if op == Adasum:
        check_adasum("grouped_allreduce", _h.set_size(pid))
    tensors = list(tensors)
    if not tensors:
        return []
    labels = _labels.current()
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        out = []
        for i, t in enumerate(tensors):
            with _labels.given(labels[i:i + 1] if labels else None):
                out.append(allreduce(t, op=op, compression=compression, prescale_factor=prescale_factor,
                                     device_dense=device_dense, device_sparse=device_sparse, process_set=process_set,
                                     postscale_factor=postscale_factor,
                                     name=None if name is None else "%s_%d" % (name, i)))
        return out
    compressed = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    results = [None] * len(tensors)
    by_dtype = {}
    for i, (t, _) in enumerate(compressed):
        _h.check_dtype("grouped_allreduce", t, _h.NUMERIC)
        by_dtype.setdefault(t.dtype, []).append(i)
    for dtype, idx in by_dtype.items():
        group = [compressed[i][0] for i in idx]
        group_name = name if name is None or len(by_dtype) == 1 else "%s_%s" % (name, dtype.name)
        group_labels = [labels[i] for i in idx] if labels else None
        _labels.register("HorovodGroupedAllreduce", None, group_name, ignore_name_scope, group_labels)
        with _h.on(device_dense):
            out = _h.ops().horovod_grouped_allreduce(group, reduce_op=op, prescale_factor=prescale_factor,
                                                     postscale_factor=postscale_factor,
                                                     ignore_name_scope=ignore_name_scope, process_set_id=pid,
                                                     **_h.names("HorovodGroupedAllreduce", group[0], group_name))
        _labels.register("HorovodGroupedAllreduce", out[0], group_name, ignore_name_scope, group_labels)
        for i, r in zip(idx, out):
            results[i] = compression.decompress(r, compressed[i][1])
    return results
