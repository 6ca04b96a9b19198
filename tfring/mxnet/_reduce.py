"""tfring.mxnet's allreduce and grouped_allreduce (in place or into new arrays), pushed into MXNet's engine."""
import mxnet as mx

from tfring.common.process_sets import global_process_set
from tfring.mxnet import _handles as _h


def _push_reduce(fn, prefix, tensors, in_place, average, name, priority, prescale, postscale, process_set, op):
    """Checks and pushes one allreduce of `tensors` (into new arrays, or in place); returns the outputs."""
    op = _h.resolve(fn, average, op)
    tensors = list(tensors)
    _h.check_arrays(fn, tensors, reduce=True)
    outputs = tensors if in_place else [mx.nd.empty(t.shape, ctx=t.context, dtype=t.dtype) for t in tensors]
    _h.push(_h.ALLREDUCE, prefix, tensors, outputs, name, process_set, priority, op, prescale, postscale)
    return outputs


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
    return _push_reduce("allreduce", "allreduce", [tensor], False, average, name, priority, prescale_factor,
                        postscale_factor, process_set, op)[0]


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, op=None):
    """In-place `allreduce`: `tensor` receives the result (see `allreduce` for the arguments and errors).

    Returns:
        mx.nd.NDArray: `tensor` itself.
    """
    return _push_reduce("allreduce_", "allreduce", [tensor], True, average, name, priority, prescale_factor,
                        postscale_factor, process_set, op)[0]


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set, op=None):
    """`allreduce` of a list of arrays as one operation (fused together; see `allreduce` for the arguments).

    Returns:
        list of mx.nd.NDArray: the results, in the order of `tensors`.
    """
    return _push_reduce("grouped_allreduce", "grouped_allreduce", tensors, False, average, name, priority,
                        prescale_factor, postscale_factor, process_set, op)


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set, op=None):
    """In-place `grouped_allreduce`.

    Returns:
        list of mx.nd.NDArray: `tensors` themselves.
    """
    return _push_reduce("grouped_allreduce_", "grouped_allreduce", tensors, True, average, name, priority,
                        prescale_factor, postscale_factor, process_set, op)
