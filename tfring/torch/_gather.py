"""Allgather, broadcast and alltoall for torch tensors (Horovod's `horovod.torch` signatures), differentiable."""
import operator

import torch

from tfring.common.basics import rank
from tfring.common.process_sets import global_process_set, process_set_of
from tfring.torch import _handles as _h
from tfring.torch._handles import Average
from tfring.torch._reduce import allreduce, grouped_allreduce


def _first(outputs):
    return outputs[0]


@_h.shared_docs
def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating `tensor` of every rank along the first dimension (in rank order).

    Args:
        tensor: the tensor to gather (same trailing dimensions on every rank; the first may differ; not modified).
        {name_and_set}

    Returns:
        int: a handle for `poll()` / `synchronize()` (which returns the concatenated tensor).

    Raises:
        ValueError: unsupported dtype, unregistered process set, a name already in flight.
    """
    fn = "allgather_async"
    pid = _h.set_id(fn, process_set)
    tensor = _h.dense(fn, tensor)
    return _h.submit(_h.C.allgather_async(tensor, _h.name_arg(name), pid), [tensor], _first)


class _Allgather(torch.autograd.Function):
    """Horovod's gradient: this rank's rows of the average of every rank's gradient."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.shape, ctx.process_set = tensor.shape, process_set
        return _h.synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        return _my_rows(grad, _offsets(ctx.process_set, [_rows(ctx.shape)])[0], ctx.shape), None, None


def _rows(shape):
    return shape[0] if len(shape) else 1  # a scalar gathers as one row


def _my_rows(grad, offset, shape):
    return grad.narrow(0, offset, _rows(shape)).reshape(shape)


def _offsets(process_set, dims):
    """Where this rank's rows start in each gathered tensor: the sum of the lower ranks' first dimensions."""
    dims = [torch.tensor([d], dtype=torch.int64) for d in dims]
    gathered = _h.synchronize(grouped_allgather_async(dims, process_set=process_set))
    r = process_set_of(_h.set_id("allgather", process_set)).rank()
    return [int(g[:r].sum()) for g in gathered]


@_h.shared_docs
def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates `tensor` of every rank along the first dimension (in rank order); differentiable.

    Args:
        tensor: the tensor to gather (same trailing dimensions on every rank; the first may differ; not modified).
        {name_and_set}

    Returns:
        torch.Tensor: the concatenation; its first dimension is the sum of every rank's.
    """
    return _Allgather.apply(tensor, name, process_set)


@_h.shared_docs
def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts an allgather of each tensor of a list, negotiated as one group.

    Args:
        tensors: the tensors to gather (not modified).
        {group_name_and_set}

    Returns:
        int: a handle for `poll()` / `synchronize()` (which returns the list of concatenations).
    """
    fn = "grouped_allgather_async"
    pid = _h.set_id(fn, process_set)
    tensors = [_h.dense(fn, t, "tensors[%d]" % i) for i, t in enumerate(_h.group(fn, tensors))]
    return _h.submit(_h.C.grouped_allgather_async(tensors, _h.name_arg(name), pid), tensors, list)


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.shapes, ctx.process_set = [t.shape for t in tensors], process_set
        return tuple(_h.synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = grouped_allreduce(list(grad_output), op=Average, process_set=ctx.process_set)
        offsets = _offsets(ctx.process_set, [_rows(s) for s in ctx.shapes])
        return (None, None) + tuple(_my_rows(g, o, s) for g, o, s in zip(grads, offsets, ctx.shapes))


@_h.shared_docs
def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgather of each tensor of a list, negotiated as one group; differentiable.

    Args:
        tensors: the tensors to gather (not modified).
        {group_name_and_set}

    Returns:
        list: the concatenation of each tensor over the ranks.
    """
    return list(_GroupedAllgather.apply(name, process_set, *_h.group("grouped_allgather", tensors)))


def _root(fn, root_rank):
    try:
        if isinstance(root_rank, bool):
            raise TypeError
        return operator.index(root_rank)
    except TypeError:
        raise ValueError("tfring.%s: root_rank=%r must be an int (a global rank)" % (fn, root_rank)) from None


def _broadcast_async(fn, tensor, output, root_rank, name, process_set, finish):
    pid = _h.set_id(fn, process_set)
    root = _root(fn, root_rank)
    return _h.submit(_h.C.broadcast_async(tensor, output, root, _h.name_arg(name), pid), [tensor], finish)


@_h.shared_docs
def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts sending `tensor` of rank `root_rank` to every rank; the input is not modified.

    Args:
        tensor: the tensor (same dtype and shape on every rank).
        root_rank: the global rank whose value is sent (also with a process set, as Horovod).
        {name_and_set}

    Returns:
        int: a handle for `poll()` / `synchronize()` (which returns root's value).

    Raises:
        ValueError: root_rank is not an int, unsupported dtype, unregistered process set.
    """
    tensor = _h.dense("broadcast_async", tensor)
    output = _h.empty_like(tensor)
    return _broadcast_async("broadcast_async", tensor, output, root_rank, name, process_set, _first)


@_h.shared_docs
def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting `tensor` on every rank with its value on rank `root_rank`.

    Args:
        tensor: the tensor (same dtype and shape on every rank); holds root's value once synchronized.
        root_rank: the global rank whose value is sent.
        {name_and_set}

    Returns:
        int: a handle for `poll()` / `synchronize()` (which returns `tensor`).
    """
    buffers, copy_back = _h.inplace("broadcast_async_", [tensor])

    def finish(outputs):
        copy_back()
        return tensor
    return _broadcast_async("broadcast_async_", buffers[0], buffers[0], root_rank, name, process_set, finish)


class _Broadcast(torch.autograd.Function):
    """Horovod's gradient: the average of every rank's gradient on the root, zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return _h.synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = torch.zeros_like(grad)
        return grad, None, None, None


@_h.shared_docs
def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns `tensor` of rank `root_rank` on every rank; differentiable.

    Args:
        tensor: the tensor (same dtype and shape on every rank; not modified).
        root_rank: the global rank whose value is sent.
        {name_and_set}

    Returns:
        torch.Tensor: root's value.
    """
    return _Broadcast.apply(tensor, root_rank, name, process_set)


@_h.shared_docs
def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` on every rank with its value on rank `root_rank` (not differentiable).

    Args:
        tensor: the tensor (same dtype and shape on every rank).
        root_rank: the global rank whose value is sent.
        {name_and_set}

    Returns:
        torch.Tensor: `tensor`.
    """
    return _h.synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def _splits(fn, splits):
    """Alltoall splits as a list of ints ([] = an even split); the coordinator checks them against the ranks."""
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dtype.is_complex or splits.dtype == torch.bool:
            raise ValueError("tfring.%s: splits must hold integers, got dtype %s" % (fn, splits.dtype))
        if splits.dim() > 1:
            raise ValueError("tfring.%s: splits must be a vector, got shape %s" % (fn, tuple(splits.shape)))
        return [int(s) for s in splits.reshape(-1).tolist()]
    try:
        values = list(splits)
        if any(isinstance(s, bool) for s in values):
            raise TypeError
        return [operator.index(s) for s in values]
    except TypeError:
        raise ValueError("tfring.%s: splits=%r must be a list or tensor of ints" % (fn, splits)) from None


def _alltoall_result(outputs):
    return outputs[0], outputs[1]


@_h.shared_docs
def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending `splits[i]` rows of `tensor` to rank i (in order) and receiving every rank's rows for this one.

    Args:
        tensor: the tensor to distribute (same trailing dimensions on every rank; not modified).
        splits: rows for each rank (list or integer tensor, summing to the first dimension); None splits the
            first dimension evenly.
        {name_and_set}

    Returns:
        int: a handle for `poll()` / `synchronize()`, which returns `(output, received_splits)`: the received rows
        in rank order, and an int32 tensor of how many came from each rank.

    Raises:
        ValueError: splits are not integers or not a vector (the ranks' splits are checked on every rank in
            negotiation: a bad sum or length raises ValueError there).
    """
    fn = "alltoall_async"
    pid = _h.set_id(fn, process_set)
    tensor = _h.dense(fn, tensor)
    handle = _h.C.alltoall_async(tensor, _splits(fn, splits), _h.name_arg(name), pid)
    return _h.submit(handle, [tensor], _alltoall_result)


class _Alltoall(torch.autograd.Function):
    """The gradient goes back the way the rows came: an alltoall with the received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = _h.synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set, ctx.received = process_set, received
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad, _ = alltoall(grad_output, splits=ctx.received, process_set=ctx.process_set)
        return grad, None, None, None


@_h.shared_docs
def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends `splits[i]` rows of `tensor` to rank i and returns the rows every rank sent here; differentiable.

    Args:
        tensor: the tensor to distribute (same trailing dimensions on every rank; not modified).
        splits: rows for each rank (list or integer tensor); None splits the first dimension evenly.
        {name_and_set}

    Returns:
        The received rows (in rank order) when `splits` is None, else `(output, received_splits)` with
        received_splits an int32 tensor of rows from each rank (as Horovod 0.28).
    """
    return _Alltoall.apply(tensor, splits, name, process_set)
