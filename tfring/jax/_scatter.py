"""tfring.jax's broadcast, alltoall and reducescatter (see _collectives for how names and shapes work)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from tfring.common.process_sets import global_process_set, process_set_rank, process_set_size
from tfring.common.reduce_ops import Adasum, Average, Sum, resolve_op
from tfring.jax import _ffi
from tfring.jax._collectives import _allgather, _allreduce, _check_array, _finish, _names, rows, set_rank, tracing


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _broadcast(xs, name, root, pid):
    results = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]
    return _ffi.call("broadcast", xs, results, name=name, root_rank=root, process_set=pid)


def _broadcast_fwd(xs, name, root, pid):
    return _broadcast(xs, name, root, pid), None


def _broadcast_bwd(name, root, pid, _, grads):
    # Horovod's (and tfring.torch's) broadcast gradient: the gradients averaged over the ranks go to the root,
    # the others get zero.
    summed = _allreduce(list(grads), name + ".grad", int(Average), 1.0, 1.0, pid)
    is_root = _ffi.root_is_me(root, pid)
    return ([g if is_root else jnp.zeros_like(g) for g in summed],)


_broadcast.defvjp(_broadcast_fwd, _broadcast_bwd)


def grouped_broadcast(tensors, root_rank, name=None, process_set=global_process_set):
    """Every rank gets `root_rank`'s arrays (a list), in one call.

    Args:
        tensors: a list of arrays (same shapes and dtypes on every rank).
        root_rank: the global rank whose values are sent.
        name: the collective's name.
        process_set: the `tfring.ProcessSet` (default: all ranks).

    Returns:
        list: the root's arrays.

    Raises:
        ValueError: root_rank is not an int, or (eagerly) outside the set.
    """
    pid = _ffi.set_id("broadcast", process_set)
    if isinstance(root_rank, bool) or not isinstance(root_rank, (int, np.integer)):
        raise ValueError("tfring.jax.broadcast: root_rank must be an int, got %r" % (root_rank,))
    xs = [_check_array("broadcast", t, "tensors[%d]" % i) for i, t in enumerate(tensors)]
    if not xs:
        return []
    return _finish(lambda: _broadcast(xs, _names("broadcast", name, pid, xs), int(root_rank), pid), xs)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Every rank gets `root_rank`'s array.

    Args:
        tensor: a JAX array (the same shape and dtype on every rank).
        root_rank: the global rank whose value is sent.
        name: the collective's name.
        process_set: the `tfring.ProcessSet` (default: all ranks).

    Returns:
        The root's array.
    """
    return grouped_broadcast([tensor], root_rank, name, process_set)[0]


def alltoall(tensor, splits=None, name=None, process_set=global_process_set, received_splits=None):
    """Sends `splits[i]` rows of `tensor` (in order) to rank i of the set and concatenates what each rank sent.

    Args:
        tensor: an array with at least one dimension.
        splits: rows for each rank (default: the first dimension split evenly, the first ranks one more).
        name: the collective's name.
        process_set: the `tfring.ProcessSet` (default: all ranks).
        received_splits: inside jax.jit with splits that differ across ranks: the rows this rank receives from
            each rank. Eagerly they are exchanged first.

    Returns:
        tuple: (the received rows, an int32 array of the rows received from each rank).

    Raises:
        ValueError: splits of the wrong length, negative, or not adding up to the first dimension.
    """
    fn = "alltoall"
    pid = _ffi.set_id(fn, process_set)
    x = _check_array(fn, tensor)
    n = process_set_size(process_set)
    if x.ndim == 0:
        raise ValueError("tfring.jax.alltoall: tensor must have at least one dimension, got a scalar")
    splits = rows(x.shape[0], n) if splits is None else [int(v) for v in np.asarray(splits).reshape(-1)]
    if len(splits) != n or min(splits) < 0 or sum(splits) != x.shape[0]:
        raise ValueError("tfring.jax.alltoall: splits=%s must give %d non-negative row counts adding up to the first "
                         "dimension %d" % (splits, n, x.shape[0]))
    if received_splits is None:
        if tracing(x):
            # Assume every rank sends this rank as many rows as it sends itself (even splits of equal shapes).
            received_splits = [splits[process_set_rank(process_set)]] * n
        else:  # the others' splits for this rank: an alltoall of the split vector itself
            mine = jnp.asarray(splits, dtype=jnp.int32)
            results = [jax.ShapeDtypeStruct((n,), jnp.int32)] * 2
            got = _finish(lambda: _ffi.call("alltoall", [mine], results, name="alltoall.splits",
                                            splits=np.ones(n, np.int64), process_set=pid), [mine])[0]
            received_splits = [int(v) for v in np.asarray(got)]
    received_splits = [int(v) for v in received_splits]
    name = _names(fn, name, pid, [x])
    results = [jax.ShapeDtypeStruct((sum(received_splits),) + tuple(x.shape[1:]), x.dtype),
               jax.ShapeDtypeStruct((n,), jnp.int32)]
    return tuple(_finish(lambda: _ffi.call(fn, [x], results, name=name, splits=np.asarray(splits, np.int64),
                                           process_set=pid), [x]))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4, 5))
def _reducescatter(xs, name, op, prescale, postscale, pid):
    n, me = process_set_size(_ffi.process_set(pid)), set_rank(pid)
    results = [jax.ShapeDtypeStruct((rows(x.shape[0], n)[me],) + tuple(x.shape[1:]), x.dtype) for x in xs]
    return _ffi.call("reducescatter", xs, results, name=name, reduce_op=int(op), prescale=prescale,
                     postscale=postscale, process_set=pid)


def _reducescatter_fwd(xs, name, op, prescale, postscale, pid):
    return _reducescatter(xs, name, op, prescale, postscale, pid), [x.shape[0] for x in xs]


def _reducescatter_bwd(name, op, prescale, postscale, pid, dims, grads):
    # Horovod's (and tfring.torch's) reducescatter gradient: the slices' gradients gathered back, Sum scaled by
    # the set's size, then both scale factors.
    if op not in (Sum, Average):
        raise NotImplementedError("tfring.jax: the gradient of reducescatter is defined for Sum and Average only "
                                  "(got op=%d)" % op)
    n = process_set_size(_ffi.process_set(pid))
    scale = prescale * postscale * (n if op == Sum else 1)
    gathered = _allgather(list(grads), name + ".grad", pid, tuple(tuple(rows(d, n)) for d in dims))
    return ([g * jnp.asarray(scale, g.dtype) for g in gathered],)


_reducescatter.defvjp(_reducescatter_fwd, _reducescatter_bwd)


def grouped_reducescatter(tensors, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reduces each array over the set and gives rank i the i-th block of rows (the first ranks one row more).

    Args:
        tensors: a list of arrays with at least one dimension (same shapes on every rank).
        name: the collective's name.
        op: Average (default) or Sum (Min, Max, Product have no gradient).
        process_set: the `tfring.ProcessSet` (default: all ranks).
        prescale_factor, postscale_factor: multiply the inputs before, the result after the reduction.

    Returns:
        list: this rank's blocks.

    Raises:
        ValueError: a scalar, or a bad op.
        NotImplementedError: op=Adasum.
    """
    op = resolve_op("reducescatter", op, None)
    if op == Adasum:
        raise NotImplementedError("tfring.jax.reducescatter: op=Adasum is not supported (as in Horovod)")
    pid = _ffi.set_id("reducescatter", process_set)
    xs = [_check_array("reducescatter", t, "tensors[%d]" % i) for i, t in enumerate(tensors)]
    for i, x in enumerate(xs):
        if x.ndim == 0:
            raise ValueError("tfring.jax.reducescatter: tensors[%d] is a scalar; it needs at least one dimension"
                             % i)
    if not xs:
        return []
    name = _names("reducescatter", name, pid, xs)
    return _finish(lambda: _reducescatter(xs, name, int(op), float(prescale_factor), float(postscale_factor), pid), xs)


def reducescatter(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces an array over the set and gives rank i the i-th block of rows (the first ranks one row more).

    Args:
        tensor: a JAX array with at least one dimension (the same shape on every rank).
        name: the collective's name.
        op: Average (default) or Sum (Min, Max, Product have no gradient).
        process_set: the `tfring.ProcessSet` (default: all ranks).
        prescale_factor, postscale_factor: multiply the input before, the result after the reduction.

    Returns:
        This rank's block.
    """
    return grouped_reducescatter([tensor], name, op, process_set, prescale_factor, postscale_factor)[0]
