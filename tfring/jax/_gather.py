"""tfring.jax's allgather, broadcast and alltoall, eagerly and inside jax.jit; allgather and broadcast are
differentiable as Horovod's (see _handles for how names and shapes work)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from tfring.common.process_sets import global_process_set, process_set_rank, process_set_size
from tfring.common.reduce_ops import Average
from tfring.jax import _handles as _h
from tfring.jax._reduce import allreduce_arrays


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def allgather_arrays(xs, name, pid, sizes):
    results = [jax.ShapeDtypeStruct((sum(s),) + tuple(x.shape[1:]), x.dtype) for x, s in zip(xs, sizes)]
    return _h.call("allgather", xs, results, name=name, process_set=pid)


def _allgather_fwd(xs, name, pid, sizes):
    return allgather_arrays(xs, name, pid, sizes), None


def _allgather_bwd(name, pid, sizes, _, grads):
    # Horovod's (and tfring.torch's) allgather gradient: the gathered gradients averaged over the ranks, this
    # rank's rows of them (each rank's loss is taken as one term of the mean over the ranks).
    summed = allreduce_arrays(list(grads), name + ".grad", int(Average), 1.0, 1.0, pid)
    me = _h.set_rank(pid)
    return ([g[sum(s[:me]):sum(s[:me + 1])] for g, s in zip(summed, sizes)],)


allgather_arrays.defvjp(_allgather_fwd, _allgather_bwd)


def _gathered_sizes(fn, xs, sizes, pid, process_set):
    n = process_set_size(process_set)
    if sizes is not None:
        sizes = [tuple(int(v) for v in sizes)] * len(xs) if np.ndim(sizes[0]) == 0 else \
            [tuple(int(v) for v in s) for s in sizes]
        for x, s in zip(xs, sizes):
            if len(s) != n or (x.ndim and s[process_set_rank(process_set)] != x.shape[0]):
                raise ValueError("tfring.jax.%s: sizes=%s must give the first dimension of each of the %d ranks "
                                 "(this rank's is %s)" % (fn, list(s), n, x.shape[0] if x.ndim else "a scalar"))
        return sizes
    for i, x in enumerate(xs):
        if x.ndim == 0:
            raise ValueError("tfring.jax.%s: tensors[%d] is a scalar; allgather needs at least one dimension"
                             % (fn, i))
    if _h.tracing(*xs):
        return [(x.shape[0],) * n for x in xs]
    mine = jnp.asarray([x.shape[0] for x in xs], dtype=jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)
    every = np.asarray(_h.finish(lambda: allgather_arrays([mine], fn + ".sizes", pid, ((len(xs),) * n,)), [mine])[0])
    every = every.reshape(n, len(xs))
    return [tuple(int(v) for v in every[:, i]) for i in range(len(xs))]


def grouped_allgather(tensors, name=None, process_set=global_process_set, sizes=None):
    """Concatenates every rank's arrays along the first dimension, for each array of the list.

    Args:
        tensors: a list of arrays (trailing dimensions equal on every rank; the first may differ).
        name: the collective's name.
        process_set: the `tfring.ProcessSet` (default: all ranks).
        sizes: inside jax.jit when ranks have different first dimensions: every rank's first dimension (one
            tuple for all arrays, or one per array). Eagerly they are exchanged.

    Returns:
        list: the gathered arrays, rank 0's rows first.
    """
    pid = _h.set_id("grouped_allgather", process_set)
    xs = [_h.check_array("grouped_allgather", t, "tensors[%d]" % i) for i, t in enumerate(tensors)]
    if not xs:
        return []
    name = _h.names("allgather", name, pid, xs)
    sizes = _gathered_sizes("allgather", xs, sizes, pid, process_set)
    return _h.finish(lambda: allgather_arrays(xs, name, pid, tuple(sizes)), xs)


def allgather(tensor, name=None, process_set=global_process_set, sizes=None):
    """Concatenates every rank's array along the first dimension.

    Args:
        tensor: a JAX array with at least one dimension (trailing dimensions equal on every rank).
        name: the collective's name.
        process_set: the `tfring.ProcessSet` (default: all ranks).
        sizes: inside jax.jit when ranks have different first dimensions: every rank's first dimension.

    Returns:
        The gathered array, rank 0's rows first.

    Raises:
        ValueError: a scalar, or sizes= that do not fit.
    """
    return grouped_allgather([tensor], name, process_set, None if sizes is None else [sizes])[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _broadcast(xs, name, root, pid):
    results = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]
    return _h.call("broadcast", xs, results, name=name, root_rank=root, process_set=pid)


def _broadcast_fwd(xs, name, root, pid):
    return _broadcast(xs, name, root, pid), None


def _broadcast_bwd(name, root, pid, _, grads):
    # Horovod's (and tfring.torch's) broadcast gradient: the gradients averaged over the ranks go to the root,
    # the others get zero.
    summed = allreduce_arrays(list(grads), name + ".grad", int(Average), 1.0, 1.0, pid)
    is_root = _h.root_is_me(root, pid)
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
    pid = _h.set_id("broadcast", process_set)
    if isinstance(root_rank, bool) or not isinstance(root_rank, (int, np.integer)):
        raise ValueError("tfring.jax.broadcast: root_rank must be an int, got %r" % (root_rank,))
    xs = [_h.check_array("broadcast", t, "tensors[%d]" % i) for i, t in enumerate(tensors)]
    if not xs:
        return []
    return _h.finish(lambda: _broadcast(xs, _h.names("broadcast", name, pid, xs), int(root_rank), pid), xs)


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
    pid = _h.set_id(fn, process_set)
    x = _h.check_array(fn, tensor)
    n = process_set_size(process_set)
    if x.ndim == 0:
        raise ValueError("tfring.jax.alltoall: tensor must have at least one dimension, got a scalar")
    splits = _h.rows(x.shape[0], n) if splits is None else [int(v) for v in np.asarray(splits).reshape(-1)]
    if len(splits) != n or min(splits) < 0 or sum(splits) != x.shape[0]:
        raise ValueError("tfring.jax.alltoall: splits=%s must give %d non-negative row counts adding up to the first "
                         "dimension %d" % (splits, n, x.shape[0]))
    if received_splits is None:
        if _h.tracing(x):
            # Assume every rank sends this rank as many rows as it sends itself (even splits of equal shapes).
            received_splits = [splits[process_set_rank(process_set)]] * n
        else:  # the others' splits for this rank: an alltoall of the split vector itself
            mine = jnp.asarray(splits, dtype=jnp.int32)
            results = [jax.ShapeDtypeStruct((n,), jnp.int32)] * 2
            got = _h.finish(lambda: _h.call("alltoall", [mine], results, name="alltoall.splits",
                                            splits=np.ones(n, np.int64), process_set=pid), [mine])[0]
            received_splits = [int(v) for v in np.asarray(got)]
    received_splits = [int(v) for v in received_splits]
    name = _h.names(fn, name, pid, [x])
    results = [jax.ShapeDtypeStruct((sum(received_splits),) + tuple(x.shape[1:]), x.dtype),
               jax.ShapeDtypeStruct((n,), jnp.int32)]
    return tuple(_h.finish(lambda: _h.call(fn, [x], results, name=name, splits=np.asarray(splits, np.int64),
                                           process_set=pid), [x]))
