"""Python wrappers over the C++ collective ops (Horovod's signatures) and their gradients."""
import contextlib
import re

import tensorflow as tf

from tfring.common.process_sets import process_set_id_of, process_set_of
from tfring.common.reduce_ops import (Adasum, Average, Max, Min, Product, ReduceOp, Sum,  # noqa: F401
                                      check_num_rank_power_of_2, handle_average_backwards_compatibility)
from tfring.common.reduce_ops import NAMES as _OP_NAMES, check_adasum, check_op, resolve_op
from tfring.tensorflow import _graph_order, _labels, _library  # noqa: F401 (_graph_order: on import)
from tfring.tensorflow._topology_ops import (local_rank_op, local_size_op, process_set_included_op,  # noqa: F401
                                             rank_op, size_op)
from tfring.tensorflow.compression import Compression

_NUMERIC = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
            tf.float64)
_ANY = _NUMERIC + (tf.bool,)


def _ops():
    return _library.load()


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
        from tfring.common.basics import is_initialized
        if not is_initialized():
            raise ValueError("tfring.%s: tfring has not been initialized (or was shut down); call tfring.init() "
                             "first" % fn)


def _check_dtype(fn, tensor, allowed):
    _require_init(fn)
    if tensor.dtype not in allowed:
        raise TypeError("tfring.%s: tensor dtype %s is not supported; supported: %s"
                        % (fn, tensor.dtype.name, ", ".join(d.name for d in allowed)))


def _set_id(fn, process_set):
    """process_set_id attr of a `process_set=` argument; ValueError if it names no registered set."""
    return process_set_id_of(process_set, fn)


def _set_size(process_set_id):
    return process_set_of(process_set_id).size()


def _set_rank(process_set_id):
    return process_set_of(process_set_id).rank()


def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0, ignore_name_scope=False,
               process_set_id=0):
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype("allreduce", tensor, _NUMERIC)
    _labels.register("HorovodAllreduce", None, name, ignore_name_scope, _labels.current())  # eager: before
    out = _ops().horovod_allreduce(tensor, reduce_op=op, prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                                   process_set_id=process_set_id, **_names("HorovodAllreduce", tensor, name))
    _labels.register("HorovodAllreduce", out, name, ignore_name_scope, _labels.current())  # graph: after
    return out


def _on(device):
    """Horovod's device_dense/device_sparse: place the collective there (GPU builds run it on that GPU)."""
    return tf.device(device) if device else contextlib.nullcontext()


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=None, ignore_name_scope=False):
    """Reduces `tensor` over the ranks of `process_set`; every rank receives the result.

    A `tf.IndexedSlices` is allgathered instead, as in Horovod. Integer `Average` truncates toward zero.

    Args:
        tensor: a tensor (or value convertible to one) of a numeric dtype, or a `tf.IndexedSlices`.
        average: deprecated (Horovod): True means `op=Average`, False `op=Sum`.
        device_dense, device_sparse: device for the collective (GPU builds) / for `tf.IndexedSlices`' allgathers.
        compression: `Compression.none`, `.fp16` or `.bf16`: the dtype floating tensors travel in.
        op: `Average` (default), `Sum`, `Min`, `Max`, `Product` or `Adasum` (power-of-two sets only).
        prescale_factor, postscale_factor: multiply the input before, the result after the reduction.
        name: what ranks match the collective by (default: from the input in graphs, the op type eagerly).
        process_set: the `tfring.ProcessSet` to run on (default: all ranks); only its ranks call it.
        ignore_name_scope: in a graph, leave the enclosing name scopes out of the negotiated name.

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
    pid = _set_id("allreduce", process_set)
    if op == Adasum:
        if isinstance(tensor, tf.IndexedSlices):
            raise NotImplementedError("tfring.allreduce: Adasum does not support tf.IndexedSlices; pass dense "
                                      "gradients (sparse_as_dense=True)")
        check_adasum("allreduce", _set_size(pid))
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
    """Allreduces a list of tensors in one negotiation, fused together (one op per dtype).

    Args:
        tensors: a list of tensors; a `tf.IndexedSlices` among them makes every element an `allreduce`.
        average: deprecated (Horovod): True means `op=Average`, False `op=Sum`.
        device_dense, device_sparse: device for the collective (GPU builds) / for `tf.IndexedSlices`' allgathers.
        compression: `Compression.none`, `.fp16` or `.bf16`: the dtype floating tensors travel in.
        op: `Average` (default), `Sum`, `Min`, `Max`, `Product` or `Adasum` (power-of-two sets only).
        prescale_factor, postscale_factor: multiply the input before, the result after the reduction.
        name: what ranks match the collective by (default: from the input in graphs, the op type eagerly).
        process_set: the `tfring.ProcessSet` to run on (default: all ranks); only its ranks call it.
        ignore_name_scope: in a graph, leave the enclosing name scopes out of the negotiated name.

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
    pid = _set_id("grouped_allreduce", process_set)
    if op == Adasum:
        check_adasum("grouped_allreduce", _set_size(pid))
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
        _check_dtype("grouped_allreduce", t, _NUMERIC)
        by_dtype.setdefault(t.dtype, []).append(i)
    for dtype, idx in by_dtype.items():
        group = [compressed[i][0] for i in idx]
        group_name = name if name is None or len(by_dtype) == 1 else "%s_%s" % (name, dtype.name)
        group_labels = [labels[i] for i in idx] if labels else None
        _labels.register("HorovodGroupedAllreduce", None, group_name, ignore_name_scope, group_labels)
        with _on(device_dense):
            out = _ops().horovod_grouped_allreduce(group, reduce_op=op, prescale_factor=prescale_factor,
                                                   postscale_factor=postscale_factor,
                                                   ignore_name_scope=ignore_name_scope, process_set_id=pid,
                                                   **_names("HorovodGroupedAllreduce", group[0], group_name))
        _labels.register("HorovodGroupedAllreduce", out[0], group_name, ignore_name_scope, group_labels)
        for i, r in zip(idx, out):
            results[i] = compression.decompress(r, compressed[i][1])
    return results


def allgather(tensor, name=None, process_set=None, ignore_name_scope=False):
    """Concatenates every rank's tensor along dimension 0, in rank order.

    The first dimension may differ between ranks; the others must agree. A scalar gathers to a vector.

    Args:
        tensor: a tensor of a numeric or bool dtype.
        name: what ranks match the collective by (default: from the input in graphs, the op type eagerly).
        process_set: the `tfring.ProcessSet` to run on (default: all ranks); only its ranks call it.
        ignore_name_scope: in a graph, leave the enclosing name scopes out of the negotiated name.

    Returns:
        A tensor whose first dimension is the sum of the ranks' first dimensions.

    Raises:
        ValueError: `process_set` is not registered; tfring is not initialized.
        TypeError: the dtype is not supported.
        tf.errors.FailedPreconditionError: the ranks disagree on dtype or the other dimensions.
    """
    pid = _set_id("allgather", process_set)
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype("allgather", tensor, _ANY)
    return _ops().horovod_allgather(tensor, ignore_name_scope=ignore_name_scope, process_set_id=pid,
                                    **_names("HorovodAllgather", tensor, name))


def grouped_allgather(tensors, name=None, process_set=None, ignore_name_scope=False):
    """`allgather` of a list of tensors in one negotiation (one op when they share a dtype).

    Args:
        tensors: a list of tensors of numeric or bool dtypes.
        name: what ranks match the collective by (default: from the input in graphs, the op type eagerly).
        process_set: the `tfring.ProcessSet` to run on (default: all ranks); only its ranks call it.
        ignore_name_scope: in a graph, leave the enclosing name scopes out of the negotiated name.

    Returns:
        list: the gathered tensors, in the order of `tensors`.

    Raises:
        ValueError: `process_set` is not registered; tfring is not initialized.
        TypeError: a dtype is not supported.
    """
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
    """Every rank of the set receives `root_rank`'s tensor.

    Args:
        tensor: a tensor of a numeric or bool dtype (the same shape on every rank).
        root_rank: the global rank whose value is sent (also with a process set).
        name: what ranks match the collective by (default: from the input in graphs, the op type eagerly).
        process_set: the `tfring.ProcessSet` to run on (default: all ranks); only its ranks call it.
        ignore_name_scope: in a graph, leave the enclosing name scopes out of the negotiated name.

    Returns:
        A tensor: `root_rank`'s value.

    Raises:
        TypeError: `root_rank` is not an int, or the dtype is not supported.
        ValueError: `process_set` is not registered; tfring is not initialized.
        tf.errors.InvalidArgumentError: `root_rank` is not a rank of the set.
    """
    pid = _set_id("broadcast", process_set)
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise TypeError("tfring.broadcast: root_rank must be an int, got %r" % (root_rank,))
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype("broadcast", tensor, _ANY)
    return _ops().horovod_broadcast(tensor, root_rank=root_rank, ignore_name_scope=ignore_name_scope,
                                    process_set_id=pid, **_names("HorovodBroadcast", tensor, name))


def alltoall(tensor, splits=None, name=None, process_set=None, ignore_name_scope=False):
    """Sends `splits[i]` rows of `tensor` to rank i of the set and receives the rows the others send.

    Args:
        tensor: a tensor of a numeric or bool dtype.
        splits: rows for each rank (a list or 1-D int tensor summing to `tensor`'s first dimension); None
            splits the rows evenly.
        name: what ranks match the collective by (default: from the input in graphs, the op type eagerly).
        process_set: the `tfring.ProcessSet` to run on (default: all ranks); only its ranks call it.
        ignore_name_scope: in a graph, leave the enclosing name scopes out of the negotiated name.

    Returns:
        The received rows (concatenated in rank order); with `splits` given, the pair `(rows,
        received_splits)`, `received_splits[i]` being the number of rows rank i sent, as in Horovod.

    Raises:
        ValueError: `process_set` is not registered; tfring is not initialized.
        TypeError: the dtype is not supported.
        tf.errors.InvalidArgumentError: the splits do not add up.
    """
    pid = _set_id("alltoall", process_set)
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype("alltoall", tensor, _ANY)
    splits_t = tf.zeros([0], tf.int32) if splits is None else tf.cast(tf.convert_to_tensor(splits), tf.int32)
    out, received = _ops().horovod_alltoall(tensor, splits_t, ignore_name_scope=ignore_name_scope,
                                            process_set_id=pid, **_names("HorovodAlltoall", tensor, name))
    return out if splits is None else (out, received)


def reducescatter(tensor, op=Average, name=None, process_set=None, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over the ranks, then rank i of the set keeps the i-th block of dimension 0.

    The first `dim0 % size` ranks get one row more than the others.

    Args:
        tensor: a tensor of a numeric dtype, at least 1-D, of the same shape on every rank.
        op: `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        name: what ranks match the collective by (default: from the input in graphs, the op type eagerly).
        process_set: the `tfring.ProcessSet` to run on (default: all ranks); only its ranks call it.
        ignore_name_scope: in a graph, leave the enclosing name scopes out of the negotiated name.
        prescale_factor, postscale_factor: multiply the input before, the result after the reduction.

    Returns:
        A tensor: this rank's block of the reduced tensor.

    Raises:
        ValueError: `op` is unknown, or `process_set` is not registered; tfring is not initialized.
        TypeError: the dtype is not supported.
        tf.errors.InvalidArgumentError: `tensor` is a scalar.
    """
    pid = _set_id("reducescatter", process_set)
    check_op("reducescatter", op, adasum=False)
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype("reducescatter", tensor, _NUMERIC)
    return _ops().horovod_reducescatter(tensor, reduce_op=op, prescale_factor=prescale_factor,
                                        postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                                        process_set_id=pid, **_names("HorovodReducescatter", tensor, name))


def grouped_reducescatter(tensors, op=Average, name=None, process_set=None, ignore_name_scope=False,
                          prescale_factor=1.0, postscale_factor=1.0):
    """`reducescatter` of a list of tensors in one negotiation (one op when they share a dtype).

    Args:
        tensors: a list of tensors of numeric dtypes.
        op: `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        name: what ranks match the collective by (default: from the input in graphs, the op type eagerly).
        process_set: the `tfring.ProcessSet` to run on (default: all ranks); only its ranks call it.
        ignore_name_scope: in a graph, leave the enclosing name scopes out of the negotiated name.
        prescale_factor, postscale_factor: multiply the input before, the result after the reduction.

    Returns:
        list: this rank's blocks, in the order of `tensors`.

    Raises:
        ValueError: `op` is unknown, or `process_set` is not registered; tfring is not initialized.
        TypeError: a dtype is not supported.
    """
    pid = _set_id("grouped_reducescatter", process_set)
    check_op("grouped_reducescatter", op, adasum=False)
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
    """Marks this rank as out of data: it contributes zeros to the set's allreduces until every rank joined.

    Args:
        process_set: the `tfring.ProcessSet` to join (default: all ranks).

    Returns:
        The global rank that joined last (an int eagerly, a tensor in a graph).

    Raises:
        ValueError: tfring is not initialized, or `process_set` is not registered.
    """
    _require_init("join")
    result = _ops().horovod_join(process_set_id=_set_id("join", process_set))
    return int(result) if tf.executing_eagerly() else result


def barrier(process_set=None):
    """Waits until every rank of the set reached this barrier.

    Args:
        process_set: the `tfring.ProcessSet` (default: all ranks).

    Returns:
        The op (eagerly: already run).

    Raises:
        ValueError: tfring is not initialized, or `process_set` is not registered.
    """
    _require_init("barrier")
    return _ops().horovod_barrier(process_set_id=_set_id("barrier", process_set))

