"""Allreduce for torch tensors (Horovod's `horovod.torch` signatures), differentiable."""
import torch

from tfring.common.process_sets import global_process_set
from tfring.common.reduce_ops import resolve_op
from tfring.torch import _handles as _h
from tfring.torch._handles import Adasum
from tfring.torch.compression import Compression


def _allreduce_async(fn, tensors, outputs, name, op, prescale_factor, postscale_factor, process_set, finish):
    pid = _h.set_id(fn, process_set)
    if op == Adasum:
        _h.check_adasum_on(fn, pid)
    args = (_h.name_arg(name), int(op), float(prescale_factor), float(postscale_factor), pid)
    if outputs is None:  # one tensor
        handle = _h.C.allreduce_async(tensors[0], finish.output, *args)
    else:
        handle = _h.C.grouped_allreduce_async(tensors, outputs, *args)
    return _h.submit(handle, tensors, finish)


class _Result:
    """Turns the extension's outputs into the Python result: output 0, or all of them for grouped ops; in-place
    ops copy non-contiguous tensors back and return them."""

    def __init__(self, output=None, grouped=False, inplace=None, copy_back=None):
        self.output, self.grouped, self.inplace, self.copy_back = output, grouped, inplace, copy_back

    def __call__(self, outputs):
        if self.copy_back is not None:
            self.copy_back()
            outputs = self.inplace
        return list(outputs) if self.grouped else outputs[0]


@_h.shared_docs
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts reducing `tensor` over the ranks (Average by default); the input is not modified.

    Collectives are matched across ranks by name: every rank must pass the same dtype and shape under a name.
    Unnamed collectives are numbered per kind and process set, so every rank must issue them in the same order.

    Args:
        tensor: the tensor to reduce.
        average: deprecated; True means op=Average, False op=Sum.
        name: the collective's name (default: auto-generated).
        {reduce_args}

    Returns:
        int: a handle for `poll()` / `synchronize()` (which returns the reduced tensor).

    Raises:
        ValueError: bad op, both op and average, unsupported dtype, unregistered process set, a name in flight.
        NotImplementedError: Adasum over a number of ranks that is not a power of two.
        RuntimeError: tfring is not initialized.
    """
    op = resolve_op("allreduce_async", op, average)
    tensor = _h.dense("allreduce_async", tensor)
    return _allreduce_async("allreduce_async", [tensor], None, name, op, prescale_factor, postscale_factor,
                            process_set, _Result(output=_h.empty_like(tensor)))


@_h.shared_docs
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts reducing `tensor` over the ranks in place.

    Args:
        tensor: the tensor to reduce; holds the result once synchronized.
        average: deprecated; True means op=Average, False op=Sum.
        name: the collective's name (default: auto-generated).
        {reduce_args}

    Returns:
        int: a handle for `poll()` / `synchronize()` (which returns `tensor`).

    Raises:
        ValueError: see `allreduce_async`.
        NotImplementedError: Adasum over a number of ranks that is not a power of two.
    """
    op = resolve_op("allreduce_async_", op, average)
    buffers, copy_back = _h.inplace("allreduce_async_", [tensor])
    result = _Result(output=buffers[0], inplace=[tensor], copy_back=copy_back)
    return _allreduce_async("allreduce_async_", buffers, None, name, op, prescale_factor, postscale_factor,
                            process_set, result)


class _Allreduce(torch.autograd.Function):
    """The gradient of an allreduce is the allreduce of the gradient, with the same op and factors (Horovod)."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return _h.synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                              process_set))

    @staticmethod
    def backward(ctx, grad_output):
        average, op, pre, post, ps = ctx.args
        grad = allreduce(grad_output, average=average, op=op, prescale_factor=pre, postscale_factor=post,
                         process_set=ps)
        return (grad,) + (None,) * 6


@_h.shared_docs
def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over the ranks (Average by default) and returns the result; differentiable.

    Args:
        tensor: the tensor to reduce (not modified).
        average: deprecated; True means op=Average, False op=Sum.
        name: the collective's name (default: auto-generated).
        compression: `Compression.none` (default) or `Compression.fp16` for the transfer.
        {reduce_args}

    Returns:
        torch.Tensor: the reduced tensor, same shape and dtype as `tensor`.

    Raises:
        ValueError: see `allreduce_async`; the ranks passed an invalid argument.
        RuntimeError: the ranks disagree on the dtype or shape, or the collective failed.
    """
    compressed, ctx = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, average, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


@_h.shared_docs
def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces `tensor` over the ranks in place (not differentiable).

    Args:
        tensor: the tensor to reduce; holds the result afterwards.
        average: deprecated; True means op=Average, False op=Sum.
        name: the collective's name (default: auto-generated).
        {reduce_args}

    Returns:
        torch.Tensor: `tensor`.
    """
    return _h.synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                           process_set))


@_h.shared_docs
def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts reducing a list of tensors as one group (negotiated together); the inputs are not modified.

    Args:
        tensors: the tensors to reduce (same device).
        average: deprecated; True means op=Average, False op=Sum.
        name: base name of the group (default: auto-generated); tensor i is named `<name>_<i+1>of<n>`.
        {group_reduce_args}

    Returns:
        int: a handle for `poll()` / `synchronize()` (which returns the list of reduced tensors).

    Raises:
        ValueError: see `allreduce_async`; `tensors` is empty.
    """
    fn = "grouped_allreduce_async"
    op = resolve_op(fn, op, average)
    tensors = [_h.dense(fn, t, "tensors[%d]" % i) for i, t in enumerate(_h.group(fn, tensors))]
    outputs = [_h.empty_like(t) for t in tensors]
    return _allreduce_async(fn, tensors, outputs, name, op, prescale_factor, postscale_factor, process_set,
                            _Result(grouped=True))


@_h.shared_docs
def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """Starts reducing a list of tensors in place as one group.

    Args:
        tensors: the tensors to reduce (same device); they hold the results once synchronized.
        average: deprecated; True means op=Average, False op=Sum.
        name: base name of the group (default: auto-generated).
        {group_reduce_args}

    Returns:
        int: a handle for `poll()` / `synchronize()` (which returns the list `tensors`).

    Raises:
        ValueError: see `allreduce_async`; `tensors` is empty.
    """
    fn = "grouped_allreduce_async_"
    op = resolve_op(fn, op, average)
    tensors = _h.group(fn, tensors)
    buffers, copy_back = _h.inplace(fn, tensors)
    return _allreduce_async(fn, buffers, buffers, name, op, prescale_factor, postscale_factor, process_set,
                            _Result(grouped=True, inplace=tensors, copy_back=copy_back))


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return tuple(_h.synchronize(grouped_allreduce_async(list(tensors), average, name, op, prescale_factor,
                                                            postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        average, op, pre, post, ps = ctx.args
        grads = grouped_allreduce(list(grad_output), average=average, op=op, prescale_factor=pre,
                                  postscale_factor=post, process_set=ps)
        return (None,) * 6 + tuple(grads)


@_h.shared_docs
def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors as one group and returns the results; differentiable.

    Args:
        tensors: the tensors to reduce (not modified).
        average: deprecated; True means op=Average, False op=Sum.
        name: base name of the group (default: auto-generated).
        compression: `Compression.none` (default) or `Compression.fp16` for the transfer.
        {group_reduce_args}

    Returns:
        list: the reduced tensors, in the order of `tensors`.
    """
    pairs = [compression.compress(t) for t in _h.group("grouped_allreduce", tensors)]
    reduced = _GroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor, process_set,
                                      *[p[0] for p in pairs])
    return [compression.decompress(t, p[1]) for t, p in zip(reduced, pairs)]


@_h.shared_docs
def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """Reduces a list of tensors in place as one group (not differentiable).

    Args:
        tensors: the tensors to reduce; they hold the results afterwards.
        average: deprecated; True means op=Average, False op=Sum.
        name: base name of the group (default: auto-generated).
        {group_reduce_args}

    Returns:
        list: `tensors`.
    """
    return _h.synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                   process_set))
