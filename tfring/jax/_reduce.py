"""tfring.jax's allreduce and grouped_allreduce, eagerly and inside jax.jit (XLA FFI, zero copy on CPU),
differentiable for Sum and Average (see _handles for how names and shapes work)."""
import functools

import jax

from tfring.common.process_sets import global_process_set
from tfring.common.reduce_ops import Adasum, Average, Sum, resolve_op
from tfring.jax import _handles as _h
from tfring.jax.compression import Compression, checked


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4, 5))
def allreduce_arrays(xs, name, op, prescale, postscale, pid):
    results = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]
    return _h.call("allreduce", xs, results, name=name, reduce_op=int(op), prescale=prescale, postscale=postscale,
                   process_set=pid)


def _allreduce_fwd(xs, name, op, prescale, postscale, pid):
    return allreduce_arrays(xs, name, op, prescale, postscale, pid), None


def _allreduce_bwd(name, op, prescale, postscale, pid, _, grads):
    if op not in (Sum, Average):
        raise NotImplementedError("tfring.jax: the gradient of allreduce is defined for Sum and Average only "
                                  "(got op=%d)" % op)
    return (allreduce_arrays(list(grads), name + ".grad", op, prescale, postscale, pid),)


allreduce_arrays.defvjp(_allreduce_fwd, _allreduce_bwd)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Reduces every array of a list over the ranks of the set, in one fused collective.

    Args:
        tensors: a list of arrays (every rank the same shapes and dtypes, in the same order).
        average: deprecated; use op.
        name: the collective's name (default: numbered in call order; inside jax.jit, in trace order).
        compression: `Compression.none` (default), `.fp16` or `.bf16`: floating arrays travel as that 16-bit type
            (each array's result is back in its own dtype).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor, postscale_factor: multiply the inputs before, the result after the reduction.
        process_set: the `tfring.ProcessSet` to reduce over (default: all ranks).

    Returns:
        list: the reduced arrays.

    Raises:
        ValueError: a bad op or compression, unregistered process set, or arguments the ranks disagree on
            (eagerly).
    """
    checked("grouped_allreduce", compression)
    op = resolve_op("grouped_allreduce", op, average)
    pid = _h.set_id("grouped_allreduce", process_set)
    if op == Adasum:
        raise NotImplementedError("tfring.jax: op=Adasum is not implemented for JAX arrays")
    xs = [_h.check_array("grouped_allreduce", t, "tensors[%d]" % i) for i, t in enumerate(tensors)]
    if not xs:
        return []
    # Compressed first, so that the name's signature and the negotiated dtype are the wire's on every rank.
    xs, ctxs = zip(*[compression.compress(x) for x in xs])
    xs = list(xs)
    name = _h.names("allreduce", name, pid, xs)
    scale = float(prescale_factor), float(postscale_factor)
    out = _h.finish(lambda: allreduce_arrays(xs, name, int(op), *scale, pid), xs)
    return [compression.decompress(o, c) for o, c in zip(out, ctxs)]


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces an array over the ranks of the set (default: the average), eagerly or inside jax.jit.

    Args:
        tensor: a JAX array (the same shape and dtype on every rank).
        average: deprecated; use op.
        name: the collective's name (default: numbered in call order; inside jax.jit, in trace order).
        compression: `Compression.none` (default), `.fp16` or `.bf16`: a floating array travels as that 16-bit
            type; the result is back in the input's dtype.
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor, postscale_factor: multiply the input before, the result after the reduction.
        process_set: the `tfring.ProcessSet` to reduce over (default: all ranks).

    Returns:
        The reduced array (same shape and dtype).

    Raises:
        ValueError: a bad op, compression or process set, or (eagerly) an argument every rank sees is wrong.
        RuntimeError: (eagerly) the ranks disagree on shape or dtype, or the job was shut down.
    """
    checked("allreduce", compression)
    return grouped_allreduce([tensor], average, name, compression, op, prescale_factor, postscale_factor,
                             process_set)[0]
