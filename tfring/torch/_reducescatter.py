"""Reducescatter and the sparse allreduce for torch tensors (Horovod's `horovod.torch` signatures),
differentiable; both are built on allgather (their gradients, the sparse values)."""
import torch

from tfring.common.process_sets import global_process_set, process_set_of
from tfring.common.reduce_ops import Adasum, Average, Sum, check_op
from tfring.torch import _handles as _h
from tfring.torch._gather import allgather, allgather_async, grouped_allgather
from tfring.torch.compression import Compression


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts reducing a sparse COO tensor by allgathering its indices and values (Horovod's sparse path).

    Args:
        tensor: a sparse COO tensor.
        name: base name of the two allgathers.
        op: Average or Sum (Average divides the values by the number of ranks).
        process_set: the ranks that take part (default: all).

    Returns:
        callable: call it (no arguments) to wait and get the summed or averaged sparse tensor.
    """
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    # Allgather concatenates the first dimension: gather indices as [nnz, ndim], transpose back afterwards.
    indices = allgather_async(t._indices().transpose(0, 1).contiguous(), name="%s.indices" % name,
                              process_set=process_set)
    values = allgather_async(t._values(), name="%s.values" % name, process_set=process_set)
    n = process_set_of(_h.set_id("sparse_allreduce_async", process_set)).size()

    def handle():
        vals, idx = _h.synchronize(values), _h.synchronize(indices)
        if op == Average:
            vals = vals / n
        return torch.sparse_coo_tensor(idx.transpose(0, 1), vals, t.size(), check_invariants=False)
    return handle


def _reducescatter_result(outputs):
    return outputs[0]


@_h.shared_docs
def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts reducing `tensor` over the ranks and scattering the result: rank i gets the i-th block of rows.

    The first dimension is split as evenly as possible (the first ranks get one more row when it does not divide).

    Args:
        tensor: the tensor to reduce (same shape on every rank, at least one dimension; not modified).
        name: the collective's name (default: auto-generated).
        {scatter_args}

    Returns:
        int: a handle for `poll()` / `synchronize()` (which returns this rank's block).

    Raises:
        ValueError: bad op, unsupported dtype, unregistered process set.
        NotImplementedError: op=Adasum (as Horovod).
    """
    return _reducescatter_async("reducescatter_async", [tensor], name, op, process_set, prescale_factor,
                                postscale_factor)


def _reducescatter_async(fn, tensors, name, op, process_set, prescale_factor, postscale_factor):
    op = Average if op is None else op
    if op == Adasum:
        raise NotImplementedError("tfring.%s: op=Adasum is not supported by reducescatter (as in Horovod)" % fn)
    check_op(fn, op, adasum=False)
    pid = _h.set_id(fn, process_set)
    args = (_h.name_arg(name), int(op), float(prescale_factor), float(postscale_factor), pid)
    if fn.startswith("grouped"):
        tensors = [_h.dense(fn, t, "tensors[%d]" % i) for i, t in enumerate(_h.group(fn, tensors))]
        return _h.submit(_h.C.grouped_reducescatter_async(tensors, *args), tensors, list)
    tensors = [_h.dense(fn, tensors[0])]
    return _h.submit(_h.C.reducescatter_async(tensors[0], *args), tensors, _reducescatter_result)


def _scale_for_backward(ctx, grads):
    """Horovod's reducescatter gradient: Sum multiplies by the set size, then both scale factors apply."""
    factor = ctx.set_size if ctx.op == Sum else 1
    factor *= ctx.prescale_factor * ctx.postscale_factor
    return [g * factor if factor != 1 else g for g in grads]


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op, ctx.process_set = op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        ctx.set_size = process_set_of(_h.set_id("reducescatter", process_set)).size()
        return _h.synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = _scale_for_backward(ctx, [grad_output])
        return allgather(grad, process_set=ctx.process_set), None, None, None, None, None


@_h.shared_docs
def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the ranks and returns this rank's block of rows of the result; differentiable.

    Args:
        tensor: the tensor to reduce (same shape on every rank, at least one dimension; not modified).
        name: the collective's name (default: auto-generated).
        compression: `Compression.none` (default) or `Compression.fp16` for the transfer.
        {scatter_args}

    Returns:
        torch.Tensor: this rank's rows of the reduced tensor.
    """
    compressed, ctx = compression.compress(tensor)
    reduced = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


@_h.shared_docs
def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    """Starts a reducescatter of each tensor of a list, negotiated as one group.

    Args:
        tensors: the tensors to reduce (not modified).
        name: base name of the group (default: auto-generated).
        {group_scatter_args}

    Returns:
        int: a handle for `poll()` / `synchronize()` (which returns the list of this rank's blocks).
    """
    return _reducescatter_async("grouped_reducescatter_async", tensors, name, op, process_set, prescale_factor,
                                postscale_factor)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op, ctx.process_set = op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        ctx.set_size = process_set_of(_h.set_id("grouped_reducescatter", process_set)).size()
        return tuple(_h.synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set,
                                                                prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = _scale_for_backward(ctx, list(grad_output))
        return (None,) * 5 + tuple(grouped_allgather(grads, process_set=ctx.process_set))


@_h.shared_docs
def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter of each tensor of a list, negotiated as one group; differentiable.

    Args:
        tensors: the tensors to reduce (not modified).
        name: base name of the group (default: auto-generated).
        compression: `Compression.none` (default) or `Compression.fp16` for the transfer.
        {group_scatter_args}

    Returns:
        list: this rank's block of each reduced tensor.
    """
    pairs = [compression.compress(t) for t in _h.group("grouped_reducescatter", tensors)]
    reduced = _GroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                          *[p[0] for p in pairs])
    return [compression.decompress(t, p[1]) for t, p in zip(reduced, pairs)]
