"""tfring.jax's reducescatter and grouped_reducescatter, eagerly and inside jax.jit, differentiable for Sum
and Average (see _handles for how names and shapes work)."""
import functools

import jax
import jax.numpy as jnp

from tfring.common.process_sets import global_process_set, process_set_of, process_set_size
from tfring.common.reduce_ops import Adasum, Average, Sum, resolve_op
from tfring.jax import _handles as _h
from tfring.jax._gather import allgather_arrays


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4, 5))
def _reducescatter(xs, name, op, prescale, postscale, pid):
    n, me = process_set_size(process_set_of(pid)), _h.set_rank(pid)
    results = [jax.ShapeDtypeStruct((_h.rows(x.shape[0], n)[me],) + tuple(x.shape[1:]), x.dtype) for x in xs]
    return _h.call("reducescatter", xs, results, name=name, reduce_op=int(op), prescale=prescale,
                   postscale=postscale, process_set=pid)


def _reducescatter_fwd(xs, name, op, prescale, postscale, pid):
    return _reducescatter(xs, name, op, prescale, postscale, pid), [x.shape[0] for x in xs]


def _reducescatter_bwd(name, op, prescale, postscale, pid, dims, grads):
    # Horovod's (and tfring.torch's) reducescatter gradient: the slices' gradients gathered back, Sum scaled by
    # the set's size, then both scale factors.
    if op not in (Sum, Average):
        raise NotImplementedError("tfring.jax: the gradient of reducescatter is defined for Sum and Average only "
                                  "(got op=%d)" % op)
    n = process_set_size(process_set_of(pid))
    scale = prescale * postscale * (n if op == Sum else 1)
    gathered = allgather_arrays(list(grads), name + ".grad", pid, tuple(tuple(_h.rows(d, n)) for d in dims))
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
    pid = _h.set_id("reducescatter", process_set)
    xs = [_h.check_array("reducescatter", t, "tensors[%d]" % i) for i, t in enumerate(tensors)]
    for i, x in enumerate(xs):
        if x.ndim == 0:
            raise ValueError("tfring.jax.reducescatter: tensors[%d] is a scalar; it needs at least one dimension"
                             % i)
    if not xs:
        return []
    name = _h.names("reducescatter", name, pid, xs)
    scale = float(prescale_factor), float(postscale_factor)
    return _h.finish(lambda: _reducescatter(xs, name, int(op), *scale, pid), xs)


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
