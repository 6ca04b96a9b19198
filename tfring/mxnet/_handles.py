"""tfring.mxnet's door to the core: loads tfring's MXNet extension (a C library used through ctypes, like
libmxnet itself), names collectives by the core's rule, turns the extension's error codes into Horovod's
exception types (MXNetError, as Horovod's mxnet binding raises for every failed collective), and runs a
collective for the collective modules (_reduce, _gather, _reducescatter): pushed into MXNet's engine, or
blocking on host copies."""
import ctypes

import mxnet as mx
import numpy as np

from tfring.common import library as _lib
from tfring.common import names as _names
from tfring.common.errors import status_error
from tfring.common.process_sets import process_set_id_of
from tfring.common.reduce_ops import Sum, resolve_op


# Core op types (tfring/cc/common/types.h).
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER = 0, 1, 2, 3, 4


def _load():
    """The extension's ctypes handle, its argument types declared.

    Returns:
        ctypes.CDLL: the loaded `_tfring_mxnet` library.

    Raises:
        ImportError: the extension is missing, was built for another mxnet, or fails to load.
    """
    c = _lib.load_extension("mxnet", mx.__version__, "mxnet", "_tfring_mxnet*.so", ctypes.CDLL)
    vp, ip, i64p, i, d = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int64), \
        ctypes.c_int, ctypes.c_double
    strs = ctypes.POINTER(ctypes.c_char_p)
    c.tfring_mxnet_last_error.restype = ctypes.c_char_p
    c.tfring_mxnet_push.argtypes = [i, i, ctypes.POINTER(vp), ctypes.POINTER(vp), strs, i, d, d, i, i, i]
    c.tfring_mxnet_host_run.argtypes = [i, i, ctypes.POINTER(vp), ip, ip, i64p, strs, i, d, d, i64p, i, i,
                                        ctypes.POINTER(vp)]
    c.tfring_mxnet_result_count.argtypes = [vp]
    c.tfring_mxnet_result_shape.argtypes = [vp, i, i64p]
    c.tfring_mxnet_result_copy.argtypes = [vp, i, vp]
    c.tfring_mxnet_result_free.argtypes = [vp]
    return c


C = _load()


class InvalidArgumentError(mx.base.MXNetError, ValueError):
    """A bad argument (alltoall splits, a scalar to reducescatter, a process set this rank is not in, ...).

    Horovod's mxnet binding raises MXNetError for these (its checks run inside MXNet's engine), its Python checks
    and tfring's other bindings ValueError: this is both, so either `except` works. When negotiation finds the
    problem (the splits, a scalar), every rank of the collective raises it.
    """


def check(rc):
    """Raises the Python error for an extension return code.

    Args:
        rc: the code an extension call returned (0: success).

    Raises:
        InvalidArgumentError: an argument is invalid (an MXNetError and a ValueError).
        HorovodInternalError: a worker process failed or left.
        mxnet.base.MXNetError: any other failure (not initialized, ranks disagree, shut down); a RuntimeError.
    """
    if rc == 0:
        return
    message = C.tfring_mxnet_last_error().decode(errors="replace")
    raise status_error(rc - 1, message, InvalidArgumentError, mx.base.MXNetError)  # rc: the core's code + 1


def tensor_names(prefix, name, process_set_id, count):
    """The names of one call's tensors, by the core's rule (tfring.common.names): Horovod's "<prefix>.<name>", or
    "<prefix>.noname.<n>" when unnamed; "_<i>of<count>" per tensor of a group.

    Args:
        prefix: the collective's kind ("allreduce", "grouped_allgather", ...).
        name: the user's name, or None.
        process_set_id: the set it runs on.
        count: how many tensors the call holds.

    Returns:
        list of bytes: one name per tensor.
    """
    base = _names.unnamed(prefix, process_set_id) if name is None else "%s.%s" % (prefix, name)
    return [n.encode() for n in _names.tensor_names(base, count)]



def string_array(values):
    """A C array of char* for `values` (bytes)."""
    return (ctypes.c_char_p * len(values))(*values)


def handle_array(arrays):
    """A C array of the NDArrayHandles of `arrays`."""
    return (ctypes.c_void_p * len(arrays))(*[a.handle.value for a in arrays])


def resolve(fn, average, op):
    """Horovod's `op=` / deprecated `average=` pair (Adasum is not implemented for MXNet)."""
    return resolve_op("mxnet." + fn, op, average, adasum=False)


def check_arrays(fn, tensors, reduce=False):
    for t in tensors:
        if not isinstance(t, mx.nd.NDArray):
            raise TypeError("tfring.mxnet.%s: expected an mx.nd.NDArray, got %s" % (fn, type(t).__name__))
        if reduce and t.dtype == np.bool_:  # MPI defines no arithmetic on C bool
            raise ValueError("tfring.mxnet.%s: bool arrays cannot be reduced; cast them to an integer dtype" % fn)
    if not tensors:
        raise ValueError("tfring.mxnet.%s: tensors is empty" % fn)


def push(op_type, prefix, inputs, outputs, name, process_set, priority, reduce_op=Sum, prescale=1.0,
         postscale=1.0, root_rank=0):
    """Pushes one engine op over `inputs` -> `outputs` (the same objects for in place)."""
    pid = process_set_id_of(process_set, prefix)
    # An input in an MKL-DNN layout (a convolution's output, inference-cached weights) must be converted to the
    # default layout before the engine op runs: converting it inside the op waits on the op itself (a deadlock),
    # and the layout is only known once its producer ran. So wait for the producers here (the extension then
    # converts on this thread); the collective itself still runs asynchronously.
    for t in inputs:
        t.wait_to_read()
    names = tensor_names(prefix, name, pid, len(inputs))
    check(C.tfring_mxnet_push(op_type, len(inputs), handle_array(inputs), handle_array(outputs),
                              string_array(names), reduce_op, float(prescale), float(postscale),
                              int(root_rank), pid, int(priority)))


def host_run(op_type, prefix, tensors, name, process_set, reduce_op=Sum, prescale=1.0, postscale=1.0,
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
    names = tensor_names(prefix, name, pid, len(arrays))
    c_splits = (ctypes.c_int64 * len(splits))(*splits) if splits else None
    result = ctypes.c_void_p()
    rc = C.tfring_mxnet_host_run(
        op_type, len(arrays), (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays]),
        (ctypes.c_int * len(arrays))(*codes), (ctypes.c_int * len(arrays))(*[a.ndim for a in arrays]),
        (ctypes.c_int64 * max(1, len(dims)))(*dims), string_array(names), reduce_op, float(prescale),
        float(postscale), c_splits, len(splits or []), pid, ctypes.byref(result))
    check(rc)
    try:
        outputs = []
        for i in range(C.tfring_mxnet_result_count(result)):
            shape = (ctypes.c_int64 * 32)()
            ndim = C.tfring_mxnet_result_shape(result, i, shape)
            is_splits = op_type == ALLTOALL and i % 2 == 1
            dtype = np.int32 if is_splits else arrays[i // 2 if op_type == ALLTOALL else i].dtype
            out = np.empty(tuple(shape[:ndim]), dtype)
            C.tfring_mxnet_result_copy(result, i, out.ctypes.data)
            outputs.append(out)
        return outputs
    finally:
        C.tfring_mxnet_result_free(result)


def to_nd(array, like):
    return mx.nd.array(array, ctx=like.context, dtype=array.dtype)
