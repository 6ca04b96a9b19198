"""tfring.mxnet's collectives and runtime control under Horovod's module name (`horovod.mxnet.mpi_ops`).

Allreduce and broadcast are pushed into MXNet's engine and return at once: the engine orders them after the
pending writes of their inputs, and reads of their outputs wait for them, as for any MXNet operator. Allgather,
alltoall and reducescatter block until done (Horovod's mxnet allgather and alltoall block too).

Errors: a bad argument raises `InvalidArgumentError` (both Horovod's MXNetError and a ValueError), any other
failure MXNetError (a RuntimeError); on the engine path they are raised when the result is read.
"""
import atexit
import ctypes
import operator
import sys

import mxnet as mx
import numpy as np

from tfring.common import basics as _basics
from tfring.common.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: F401
                           gloo_enabled, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                           mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, size, start_timeline,
                           stop_timeline)
from tfring.common.errors import HorovodInternalError  # noqa: F401
from tfring.common.reduce_ops import Adasum, Average, Max, Min, Product, Sum, resolve_op  # noqa: F401
from tfring.mxnet import _ext
from tfring.mxnet._ext import InvalidArgumentError  # noqa: F401
from tfring.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                 process_set_id_of, remove_process_set)

_exit_wait_registered = False


def init(comm=None, process_sets=None):
    """Starts tfring (see `tfring.common.basics.init`); at interpreter exit, MXNet's pending work runs first.

    tfring shuts itself down at interpreter exit (an atexit handler registered by the first init). Allreduce and
    broadcast may still be queued in MXNet's engine then (a result never read, a script ending in an exception):
    the handler registered here runs before that shutdown (atexit runs the last registered first) and waits for
    MXNet's engine, so those collectives complete on every rank instead of failing with "tfring has been shut
    down" (here and on the ranks that read them).

    Args:
        comm: run on MPI_COMM_WORLD (None), on an mpi4py communicator, or on a list of MPI_COMM_WORLD ranks.
        process_sets: `ProcessSet` objects to register (Horovod's static process sets); every rank passes the
            same list.

    Raises:
        ValueError: `comm` or a process set is invalid.
        TypeError: `comm` is neither a communicator nor a list.
        RuntimeError: the runtime failed to start.
    """
    global _exit_wait_registered
    _basics.init(comm, process_sets)
    if not _exit_wait_registered:
        atexit.register(_wait_for_engine_at_exit)  # after the core's own atexit shutdown, so it runs before it
        _exit_wait_registered = True


def _wait_for_engine_at_exit():
    """Completes MXNet's pending work (tfring collectives among it) before tfring's atexit shutdown. A pending
    collective that fails (a peer already shut down, ranks disagree) is reported in one line; a collective some
    peer never submits fails after TFRING_STALL_SHUTDOWN_TIME_SECONDS, like any stalled collective."""
    if not _basics.is_initialized():
        return  # shut down already (shutdown() waited for the engine then)
    try:
        mx.nd.waitall()
    except Exception as e:  # noqa: BLE001 (an exit handler: report, never raise)
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        sys.stderr.write("tfring.mxnet: MXNet work still pending at exit failed: %s\n" %
                         (lines[-1] if lines else type(e).__name__))
        sys.stderr.flush()


def shutdown():
    """Waits for MXNet's pending operations (ours among them), then stops the background thread.

    Raises:
        mxnet.base.MXNetError: a pending operation failed (tfring is shut down all the same).
    """
    try:
        mx.nd.waitall()
    finally:
        _basics.shutdown()  # its shutdown hook (registered by _ext) restarts the names of unnamed collectives


def _resolve_op(fn, average, op):
    """Horovod's `op=` / deprecated `average=` pair (Adasum is not implemented for MXNet)."""
    return resolve_op("mxnet." + fn, op, average, adasum=False)


def _check(fn, tensors, reduce=False):
    for t in tensors:
        if not isinstance(t, mx.nd.NDArray):
            raise TypeError("tfring.mxnet.%s: expected an mx.nd.NDArray, got %s" % (fn, type(t).__name__))
        if reduce and t.dtype == np.bool_:  # MPI defines no arithmetic on C bool
            raise ValueError("tfring.mxnet.%s: bool arrays cannot be reduced; cast them to an integer dtype" % fn)
    if not tensors:
        raise ValueError("tfring.mxnet.%s: tensors is empty" % fn)


def _push(op_type, prefix, inputs, outputs, name, process_set, priority, reduce_op=Sum, prescale=1.0,
          postscale=1.0, root_rank=0):
    """Pushes one engine op over `inputs` -> `outputs` (the same objects for in place)."""
    pid = process_set_id_of(process_set, prefix)
    # An input in an MKL-DNN layout (a convolution's output, inference-cached weights) must be converted to the
    # default layout before the engine op runs: converting it inside the op waits on the op itself (a deadlock),
    # and the layout is only known once its producer ran. So wait for the producers here (the extension then
    # converts on this thread); the collective itself still runs asynchronously.
    for t in inputs:
        t.wait_to_read()
    names = _ext.tensor_names(prefix, name, pid, len(inputs))
    _ext.check(_ext.C.tfring_mxnet_push(op_type, len(inputs), _ext.handle_array(inputs), _ext.handle_array(outputs),
                                        _ext.string_array(names), reduce_op, float(prescale), float(postscale),
                                        int(root_rank), pid, int(priority)))


def _host_run(op_type, prefix, tensors, name, process_set, reduce_op=Sum, prescale=1.0, postscale=1.0,
              splits=None):
    """Runs a collective whose output shape comes from negotiation on host copies of `tensors`; blocks.

    Returns:
        list of numpy arrays: the outputs (alltoall: output then received splits, per tensor).
    """
    pid = process_set_id_of(process_set, prefix)
    # asnumpy waits for pending writes. np.require keeps a 0-d array 0-d (np.ascontiguousarray would make it 1-d):
    # the core then rejects a scalar where the collective needs a dimension, on every rank.
    arrays = [np.require(t.asnumpy(), requirements="C") for t in tensors]
    codes = [mx.ndarray.ndarray._DTYPE_NP_TO_MX[a.dtype.type] for a in arrays]
    dims = [d for a in arrays for d in a.shape]
    names = _ext.tensor_names(prefix, name, pid, len(arrays))
    c_splits = (ctypes.c_int64 * len(splits))(*splits) if splits else None
    result = ctypes.c_void_p()
    rc = _ext.C.tfring_mxnet_host_run(
        op_type, len(arrays), (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays]),
        (ctypes.c_int * len(arrays))(*codes), (ctypes.c_int * len(arrays))(*[a.ndim for a in arrays]),
        (ctypes.c_int64 * max(1, len(dims)))(*dims), _ext.string_array(names), reduce_op, float(prescale),
        float(postscale), c_splits, len(splits or []), pid, ctypes.byref(result))
    _ext.check(rc)
    try:
        outputs = []
        for i in range(_ext.C.tfring_mxnet_result_count(result)):
            shape = (ctypes.c_int64 * 32)()
            ndim = _ext.C.tfring_mxnet_result_shape(result, i, shape)
            is_splits = op_type == _ext.ALLTOALL and i % 2 == 1
            out = np.empty(tuple(shape[:ndim]), np.int32 if is_splits else arrays[i // 2 if op_type ==
                                                                                 _ext.ALLTOALL else i].dtype)
            _ext.C.tfring_mxnet_result_copy(result, i, out.ctypes.data)
            outputs.append(out)
        return outputs
    finally:
        _ext.C.tfring_mxnet_result_free(result)


def _to_nd(array, like):
    return mx.nd.array(array, ctx=like.context, dtype=array.dtype)


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set, op=None):
    """Reduces `tensor` over the ranks of the process set into a new array; `tensor` is not modified.

    Args:
        tensor: an mx.nd.NDArray on the CPU (float16/32/64, int8/32/64, uint8).
        average: deprecated; False means Sum, True Average.
        name: the name every rank gives this reduction (None: numbered automatically).
        priority: MXNet engine priority (higher runs earlier).
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result.
        process_set: the ranks taking part (default: all).
        op: Average (default), Sum, Min, Max or Product.

    Returns:
        mx.nd.NDArray: the result, filled asynchronously by MXNet's engine.

    Raises:
        ValueError: an unsupported op or dtype, or a process set this rank is not in.
        mxnet.base.MXNetError: tfring is not initialized (a RuntimeError). Failures found later (ranks disagree
            on the shape) are raised by MXNet (MXNetError) when the result is read.
    """
    op = _resolve_op("allreduce", average, op)
    _check("allreduce", [tensor], reduce=True)
    output = mx.nd.empty(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)
    _push(_ext.ALLREDUCE, "allreduce", [tensor], [output], name, process_set, priority, op, prescale_factor,
          postscale_factor)
    return output


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, op=None):
    """In-place `allreduce`: `tensor` receives the result (see `allreduce` for the arguments and errors).

    Returns:
        mx.nd.NDArray: `tensor` itself.
    """
    op = _resolve_op("allreduce_", average, op)
    _check("allreduce_", [tensor], reduce=True)
    _push(_ext.ALLREDUCE, "allreduce", [tensor], [tensor], name, process_set, priority, op, prescale_factor,
          postscale_factor)
    return tensor


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set, op=None):
    """`allreduce` of a list of arrays as one operation (fused together; see `allreduce` for the arguments).

    Returns:
        list of mx.nd.NDArray: the results, in the order of `tensors`.
    """
    op = _resolve_op("grouped_allreduce", average, op)
    tensors = list(tensors)
    _check("grouped_allreduce", tensors, reduce=True)
    outputs = [mx.nd.empty(t.shape, ctx=t.context, dtype=t.dtype) for t in tensors]
    _push(_ext.ALLREDUCE, "grouped_allreduce", tensors, outputs, name, process_set, priority, op, prescale_factor,
          postscale_factor)
    return outputs


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set, op=None):
    """In-place `grouped_allreduce`.

    Returns:
        list of mx.nd.NDArray: `tensors` themselves.
    """
    op = _resolve_op("grouped_allreduce_", average, op)
    tensors = list(tensors)
    _check("grouped_allreduce_", tensors, reduce=True)
    _push(_ext.ALLREDUCE, "grouped_allreduce", tensors, tensors, name, process_set, priority, op, prescale_factor,
          postscale_factor)
    return tensors


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
    _check("broadcast", [tensor])
    output = mx.nd.empty(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)
    _push(_ext.BROADCAST, "broadcast", [tensor], [output], name, process_set, priority, root_rank=root_rank)
    return output


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """In-place `broadcast`: `tensor` receives root_rank's value (see `broadcast`).

    Returns:
        mx.nd.NDArray: `tensor` itself.
    """
    _check("broadcast_", [tensor])
    _push(_ext.BROADCAST, "broadcast", [tensor], [tensor], name, process_set, priority, root_rank=root_rank)
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
    _check("allgather", [tensor])
    return _to_nd(_host_run(_ext.ALLGATHER, "allgather", [tensor], name, process_set)[0], tensor)


def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    """`allgather` of a list of arrays as one operation (see `allgather`).

    Returns:
        list of mx.nd.NDArray: one gathered array per input.
    """
    tensors = list(tensors)
    _check("grouped_allgather", tensors)
    outs = _host_run(_ext.ALLGATHER, "grouped_allgather", tensors, name, process_set)
    return [_to_nd(o, t) for o, t in zip(outs, tensors)]


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
    _check("alltoall", [tensor])
    split_list = None if splits is None else _splits("alltoall", splits)
    out, received = _host_run(_ext.ALLTOALL, "alltoall", [tensor], name, process_set, splits=split_list)
    if splits is None:
        return _to_nd(out, tensor)
    return _to_nd(out, tensor), mx.nd.array(received, ctx=mx.cpu(), dtype=np.int32)


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
            raise InvalidArgumentError("tfring.mxnet.%s: splits must hold integers, got dtype %s (splits=%s)" % (
                fn, np.dtype(values.dtype).name, values.tolist()))
        if values.ndim != 1:
            raise InvalidArgumentError("tfring.mxnet.%s: splits must be a vector, got shape %s" % (
                fn, tuple(values.shape)))
        return [int(v) for v in values]
    try:
        values = list(splits)
        if any(isinstance(v, (bool, np.bool_)) for v in values):
            raise TypeError
        return [operator.index(v) for v in values]
    except TypeError:
        raise InvalidArgumentError("tfring.mxnet.%s: splits=%r must be a list or 1-D array of integers" % (
            fn, splits)) from None


def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` over the ranks and gives each rank its block of the first dimension; blocks.

    Args:
        tensor: an mx.nd.NDArray on the CPU, of the same shape on every rank.
        op: Average (default), Sum, Min, Max or Product.
        name: the name every rank gives this reducescatter (None: numbered automatically).
        priority: accepted for Horovod's signature (the call blocks).
        process_set: the ranks taking part (default: all).
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result.

    Returns:
        mx.nd.NDArray: this rank's rows of the reduced tensor (earlier ranks get one more row when the first
        dimension does not divide evenly).

    Raises:
        ValueError: an unsupported op; InvalidArgumentError (a ValueError and an MXNetError): a scalar (0-d)
            tensor (raised on every rank), an unsupported dtype, or a process set this rank is not in.
        mxnet.base.MXNetError: not initialized, or the ranks disagree (a RuntimeError).
    """
    op = _resolve_op("reducescatter", None, op)
    _check("reducescatter", [tensor], reduce=True)
    out = _host_run(_ext.REDUCESCATTER, "reducescatter", [tensor], name, process_set, op, prescale_factor,
                    postscale_factor)[0]
    return _to_nd(out, tensor)


def grouped_reducescatter(tensors, op=Average, name=None, priority=0, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """`reducescatter` of a list of arrays as one operation (see `reducescatter`).

    Returns:
        list of mx.nd.NDArray: this rank's block of each reduced array.
    """
    op = _resolve_op("grouped_reducescatter", None, op)
    tensors = list(tensors)
    _check("grouped_reducescatter", tensors, reduce=True)
    outs = _host_run(_ext.REDUCESCATTER, "grouped_reducescatter", tensors, name, process_set, op, prescale_factor,
                     postscale_factor)
    return [_to_nd(o, t) for o, t in zip(outs, tensors)]
