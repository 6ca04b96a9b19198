"""Loads tfring's MXNet extension (a C library used through ctypes, like libmxnet itself), names collectives by the
core's rule, and turns the extension's error codes into Horovod's exception types (MXNetError, as Horovod's
mxnet binding raises for every failed collective)."""
import ctypes

import mxnet as mx

from tfring.common import library as _lib
from tfring.common import names as _names
from tfring.common.errors import status_error


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
