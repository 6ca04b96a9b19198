"""tfring.mxnet's broadcast (pushed into MXNet's engine), allgather and alltoall (blocking)."""
import operator

import mxnet as mx
import numpy as np

from tfring.common.process_sets import global_process_set
from tfring.mxnet import _handles as _h


def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """Copies root_rank's `tensor` into a new array on every rank of the process set.

    Args:
        tensor: an mx.nd.NDArray on the CPU, of the same shape and dtype on every rank.
        root_rank: the sending rank (its rank in the process set).
        name: the name every rank gives this broadcast (None: numbered automatically).
        priority: MXNet engine priority.
        process_set: the ranks taking part (default: all).

    Returns:
        mx.nd.NDArray: root_rank's value, filled asynchronously by MXNet's engine.

    Raises:
        ValueError: an unsupported dtype, or a process set this rank is not in.
        mxnet.base.MXNetError: tfring is not initialized (a RuntimeError). A root out of range or mismatched
            shapes are raised by MXNet (MXNetError) when the result is read.
    """
    _h.check_arrays("broadcast", [tensor])
    output = mx.nd.empty(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)
    _h.push(_h.BROADCAST, "broadcast", [tensor], [output], name, process_set, priority, root_rank=root_rank)
    return output


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """In-place `broadcast`: `tensor` receives root_rank's value (see `broadcast`).

    Returns:
        mx.nd.NDArray: `tensor` itself.
    """
    _h.check_arrays("broadcast_", [tensor])
    _h.push(_h.BROADCAST, "broadcast", [tensor], [tensor], name, process_set, priority, root_rank=root_rank)
    return tensor


def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Concatenates every rank's `tensor` along the first dimension (which may differ across ranks); blocks.

    Args:
        tensor: an mx.nd.NDArray on the CPU (at least 1-D); other dimensions equal on every rank.
        name: the name every rank gives this allgather (None: numbered automatically).
        priority: accepted for Horovod's signature (the call blocks).
        process_set: the ranks taking part (default: all).

    Returns:
        mx.nd.NDArray: the ranks' tensors in rank order.

    Raises:
        ValueError: an unsupported dtype, or a process set this rank is not in.
        mxnet.base.MXNetError: not initialized, or the ranks disagree on dtype or trailing dimensions (a
            RuntimeError).
    """
    _h.check_arrays("allgather", [tensor])
    return _h.to_nd(_h.host_run(_h.ALLGATHER, "allgather", [tensor], name, process_set)[0], tensor)


def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    """`allgather` of a list of arrays as one operation (see `allgather`).

    Returns:
        list of mx.nd.NDArray: one gathered array per input.
    """
    tensors = list(tensors)
    _h.check_arrays("grouped_allgather", tensors)
    outs = _h.host_run(_h.ALLGATHER, "grouped_allgather", tensors, name, process_set)
    return [_h.to_nd(o, t) for o, t in zip(outs, tensors)]


def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Sends splits[i] rows of `tensor` to rank i and concatenates the rows received; blocks.

    Args:
        tensor: an mx.nd.NDArray on the CPU (at least 1-D).
        splits: rows for each rank (list, numpy or NDArray of ints); None splits the first dimension evenly.
        name: the name every rank gives this alltoall (None: numbered automatically).
        priority: accepted for Horovod's signature (the call blocks).
        process_set: the ranks taking part (default: all).

    Returns:
        mx.nd.NDArray: the rows received, in rank order; with `splits` given, `(output, received_splits)`
        where received_splits (int32, CPU) counts the rows received from each rank.

    Raises:
        InvalidArgumentError (an MXNetError and a ValueError): splits that are not integers or not a vector (raised
            here, before any communication); splits of the wrong length, negative or not adding up to the first
            dimension, or no splits and a first dimension the ranks do not divide (raised on every rank, whichever
            rank passed them); a scalar; an unsupported dtype, or a process set this rank is not in.
        mxnet.base.MXNetError: not initialized, or the ranks disagree (a RuntimeError).
    """
    _h.check_arrays("alltoall", [tensor])
    split_list = None if splits is None else _splits("alltoall", splits)
    out, received = _h.host_run(_h.ALLTOALL, "alltoall", [tensor], name, process_set, splits=split_list)
    if splits is None:
        return _h.to_nd(out, tensor)
    return _h.to_nd(out, tensor), mx.nd.array(received, ctx=mx.cpu(), dtype=np.int32)


def _splits(fn, splits):
    """Alltoall splits as a list of Python ints; the core checks them against the ranks and the tensor.

    Args:
        fn: the calling function's name, for the message.
        splits: a list/tuple of ints, or a 1-D integer numpy array or mx.nd.NDArray.

    Returns:
        list of int: the rows for each rank.

    Raises:
        InvalidArgumentError: `splits` holds something other than integers (floats, bools), or is not a vector.
    """
    if isinstance(splits, (mx.nd.NDArray, np.ndarray)):
        values = splits.asnumpy() if isinstance(splits, mx.nd.NDArray) else splits
        if not np.issubdtype(values.dtype, np.integer):
            raise _h.InvalidArgumentError("tfring.mxnet.%s: splits must hold integers, got dtype %s (splits=%s)" % (
                fn, np.dtype(values.dtype).name, values.tolist()))
        if values.ndim != 1:
            raise _h.InvalidArgumentError("tfring.mxnet.%s: splits must be a vector, got shape %s" % (
                fn, tuple(values.shape)))
        return [int(v) for v in values]
    try:
        values = list(splits)
        if any(isinstance(v, (bool, np.bool_)) for v in values):
            raise TypeError
        return [operator.index(v) for v in values]
    except TypeError:
        raise _h.InvalidArgumentError("tfring.mxnet.%s: splits=%r must be a list or 1-D array of integers" % (
            fn, splits)) from None
