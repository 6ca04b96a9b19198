"""The torch extension, its handles (Horovod's int handles: poll / synchronize), and the argument checks (and
argument docs) every collective of tfring.torch shares."""
import torch

from tfring.common import basics as _basics
from tfring.common import library as _lib
from tfring.common.basics import nccl_built  # noqa: F401
from tfring.common.docstrings import fill_docs
from tfring.common.errors import HorovodInternalError
from tfring.common.process_sets import process_set_id_of, process_set_of
from tfring.common.reduce_ops import (Adasum, Average, Max, Min, Product, Sum,  # noqa: F401
                                      check_op, handle_average_backwards_compatibility, resolve_op)
from tfring.common import reduce_ops as _reduce_ops

# The arguments the collectives share, each worded once: a docstring line "{block}" takes the block
# (`@shared_docs`), so help() shows the same words for the same argument everywhere.
_PROCESS_SET = "process_set: the ranks that take part (default: all)."
_SCALE = ("prescale_factor: multiplies the input before the reduction.\n"
          "postscale_factor: multiplies the result after it.")
_GROUP_SCALE = ("prescale_factor: multiplies the inputs before the reduction.\n"
                "postscale_factor: multiplies the results after it.")
_REDUCE_OP = "op: Average (default), Sum, Adasum, Min, Max or Product."
_SCATTER_OP = "op: Average (default), Sum, Min, Max or Product."
shared_docs = fill_docs({
    "name_and_set": "name: the collective's name (default: auto-generated).\n" + _PROCESS_SET,
    "group_name_and_set": "name: base name of the group (default: auto-generated).\n" + _PROCESS_SET,
    "reduce_args": "\n".join([_REDUCE_OP, _SCALE, _PROCESS_SET]),
    "group_reduce_args": "\n".join([_REDUCE_OP, _GROUP_SCALE, _PROCESS_SET]),
    "scatter_args": "\n".join([_SCATTER_OP, _PROCESS_SET, _SCALE]),
    "group_scatter_args": "\n".join([_SCATTER_OP, _PROCESS_SET, _GROUP_SCALE]),
})


def _load_extension():
    def load(path):
        from tfring.torch import _tfring_torch
        return _tfring_torch
    _tfring_torch = _lib.load_extension("torch", torch.__version__, "torch", "_tfring_torch*.so", load)
    # A worker failure (core status WORKERS_FAILED) raises the type the elastic run loop rolls back on.
    _tfring_torch.set_workers_failed_error(HorovodInternalError)
    return _tfring_torch


C = _load_extension()

# handle -> (objects kept alive until the op is done, function making the result from the op's outputs).
# The extension holds its own references too; this mirrors Horovod's _handle_map (synchronize of an unknown
# handle returns None).
_handle_map = {}


def submit(handle, keep, finish):
    _handle_map[handle] = (keep, finish)
    return handle


def poll(handle):
    """Whether an asynchronous collective has completed; `synchronize()` then returns without blocking.

    Args:
        handle: a handle returned by an `*_async` function of tfring.torch.

    Returns:
        bool: True once the operation has completed (successfully or not).

    Raises:
        ValueError: the handle is unknown or was already synchronized.
    """
    return bool(C.poll(handle))


def synchronize(handle):
    """Waits for an asynchronous collective and returns its result (the GIL is released while waiting).

    Args:
        handle: a handle returned by an `*_async` function of tfring.torch.

    Returns:
        The output tensor; a list of tensors for grouped collectives; `(output, received_splits)` for
        alltoall; None for a handle that is unknown or already synchronized (as Horovod).

    Raises:
        ValueError: the ranks passed an invalid argument (e.g. a broadcast root out of range).
        RuntimeError: the ranks disagree (shapes, dtypes, ...), the job was shut down, or the collective failed.
        HorovodInternalError: a worker process failed or left (the elastic run loop rolls back on it).
    """
    if handle not in _handle_map:
        return None
    try:
        outputs = C.wait(handle)
    except BaseException:
        # The op failed (the extension released its handle), or a signal handler raised while waiting (Ctrl-C):
        # then the op is still pending and the handle stays valid for another synchronize().
        try:
            C.poll(handle)
        except ValueError:
            _handle_map.pop(handle, None)
        raise
    _, finish = _handle_map.pop(handle)
    return finish(outputs)


def _reset():
    """Forgets every handle (init after shutdown; the core restarts the names of unnamed collectives itself)."""
    _handle_map.clear()
    C.reset()


_basics._shutdown_hooks.append(_reset)  # any shutdown (an elastic reset too) forgets the handles


def name_arg(name):
    """The extension's name argument: the user's name, or "" for an unnamed collective (the core names it)."""
    return "" if name is None else str(name)


def set_id(fn, process_set):
    return process_set_id_of(process_set, fn)


def check_adasum_on(fn, pid):
    """Adasum's requirement on the set's size (a power of two), for `fn`'s message."""
    _reduce_ops.check_adasum(fn, process_set_of(pid).size())


_DTYPES = (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
           torch.float32, torch.float64, torch.bool)


def _check_tensor(fn, tensor, arg="tensor"):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("tfring.%s: %s must be a torch.Tensor, got %s" % (fn, arg, type(tensor).__name__))
    if tensor.dtype not in _DTYPES:  # Horovod: ValueError
        raise ValueError("tfring.%s: %s has dtype %s, which tfring does not support; supported: %s"
                         % (fn, arg, tensor.dtype, ", ".join(str(d) for d in _DTYPES)))
    if tensor.is_cuda and not nccl_built():
        raise ValueError("tfring.%s: %s is on %s but this tfring build has no GPU support (rebuild with "
                         "TFRING_GPU_OPERATIONS=NCCL), or move it to the CPU" % (fn, arg, tensor.device))


def dense(fn, tensor, arg="tensor"):
    """A contiguous view of `tensor` (itself when it already is one), as the extension needs."""
    _check_tensor(fn, tensor, arg)
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def inplace(fn, tensors):
    """(buffers the collective writes, copy-back to run once it is done) for in-place collectives: a
    non-contiguous tensor is reduced in a contiguous copy that is copied back (Horovod refuses them)."""
    buffers = [dense(fn, t, "tensors[%d]" % i if len(tensors) > 1 else "tensor") for i, t in enumerate(tensors)]

    def copy_back():
        with torch.no_grad():  # like the extension's own writes, invisible to autograd (leaves may require grad)
            for t, b in zip(tensors, buffers):
                if b is not t:
                    t.copy_(b)
    return buffers, copy_back


def empty_like(tensor):
    """A new contiguous output for an out-of-place collective; large CPU ones reuse freed outputs' memory (the
    core's output cache, TFRING_OUTPUT_CACHE_BYTES) instead of fresh pages that fault on first touch. Tensor
    subclasses, other devices and active dispatch modes (fake tensors, tracing) get torch.empty: the cache's
    allocation bypasses torch's dispatcher."""
    if type(tensor) is not torch.Tensor or tensor.device.type != "cpu" or torch._C._len_torch_dispatch_stack():
        return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    return C.empty_like(tensor)


def group(fn, tensors):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("tfring.%s: tensors is empty" % fn)
    return tensors
