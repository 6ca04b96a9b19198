"""tfring.jax's collectives: Horovod's functions on JAX arrays, eagerly and inside jax.jit (XLA FFI, zero copy on
CPU), differentiable where Horovod's are (allreduce with Sum/Average, allgather, broadcast, reducescatter).

Shapes inside jax.jit are fixed when the program is traced, so a collective whose output size depends on other
ranks (allgather with different first dimensions, alltoall with splits) needs those sizes then: eagerly they are
exchanged first; inside jax.jit pass them (`sizes=`, `received_splits=`), else every rank is assumed to send as
many rows as this one (a mismatch is an error on the rank that sees it, never a wrong answer).
"""
import functools

import jax
import jax._src.core as jax_core
import jax.numpy as jnp
import numpy as np

from tfring.common.errors import HorovodInternalError
from tfring.common.process_sets import global_process_set, process_set_of, process_set_rank, process_set_size
from tfring.common.reduce_ops import Adasum, Average, Sum, resolve_op
from tfring.jax import _ffi
from tfring.jax.compression import Compression, checked


def tracing(*arrays):
    """Whether a trace is active (jax.jit, grad, vmap; also for concrete arrays a traced function closes over):
    sizes must then be static, and the call is part of a compiled program."""
    return not jax_core.trace_state_clean() or any(isinstance(a, jax.core.Tracer) for a in arrays)


def _names(kind, name, pid, arrays):
    if name is not None:
        return str(name)
    # Eager calls block until done, so one name per kind is reused (each distinct name compiles a program).
    if not tracing(*arrays):
        return "%s.noname.eager" % kind
    # Numbered within the trace that contains the call (a rank that traces again, e.g. for a smaller last
    # batch, numbers alike), plus the operands' signature.
    sig = ",".join("%s%s" % (a.dtype, tuple(a.shape)) for a in arrays)
    return _ffi.auto_name(kind, pid, jax_core.trace_ctx.trace, sig)


def _check_array(fn, x, arg="tensor"):
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError("tfring.jax.%s: %s must be a JAX array, got %s" % (fn, arg, type(x).__name__))
    return jnp.asarray(x)


def _finish(thunk, arrays):
    """Eager calls return when done (their name free again), raising the error types of tfring's other bindings:
    ValueError for an argument every rank sees is wrong, HorovodInternalError when a worker failed (elastic
    jobs roll back on it), RuntimeError for the rest. Inside jax.jit, errors surface as JaxRuntimeError."""
    if tracing(*arrays):
        return thunk()
    try:
        return jax.block_until_ready(thunk())
    except jax.errors.JaxRuntimeError as e:
        text = str(e)
        kind = ValueError if text.startswith("INVALID_ARGUMENT") else \
            HorovodInternalError if text.startswith("ABORTED") else RuntimeError
        raise kind(text.split(": ", 1)[-1]) from e


def set_rank(pid):
    return process_set_rank(global_process_set if pid == 0 else process_set_of(pid))


def rows(d0, n):
    return [d0 // n + (1 if i < d0 % n else 0) for i in range(n)]


# ---- allreduce ----------------------------------------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4, 5))
def _allreduce(xs, name, op, prescale, postscale, pid):
    results = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]
    return _ffi.call("allreduce", xs, results, name=name, reduce_op=int(op), prescale=prescale, postscale=postscale,
                     process_set=pid)


def _allreduce_fwd(xs, name, op, prescale, postscale, pid):
    return _allreduce(xs, name, op, prescale, postscale, pid), None


def _allreduce_bwd(name, op, prescale, postscale, pid, _, grads):
    if op not in (Sum, Average):
        raise NotImplementedError("tfring.jax: the gradient of allreduce is defined for Sum and Average only "
                                  "(got op=%d)" % op)
    return (_allreduce(list(grads), name + ".grad", op, prescale, postscale, pid),)


_allreduce.defvjp(_allreduce_fwd, _allreduce_bwd)


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
    pid = _ffi.set_id("grouped_allreduce", process_set)
    if op == Adasum:
        raise NotImplementedError("tfring.jax: op=Adasum is not implemented for JAX arrays")
    xs = [_check_array("grouped_allreduce", t, "tensors[%d]" % i) for i, t in enumerate(tensors)]
    if not xs:
        return []
    # Compressed first, so that the name's signature and the negotiated dtype are the wire's on every rank.
    xs, ctxs = zip(*[compression.compress(x) for x in xs])
    xs = list(xs)
    name = _names("allreduce", name, pid, xs)
    out = _finish(lambda: _allreduce(xs, name, int(op), float(prescale_factor), float(postscale_factor), pid), xs)
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


# ---- allgather ----------------------------------------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _allgather(xs, name, pid, sizes):
    results = [jax.ShapeDtypeStruct((sum(s),) + tuple(x.shape[1:]), x.dtype) for x, s in zip(xs, sizes)]
    return _ffi.call("allgather", xs, results, name=name, process_set=pid)


def _allgather_fwd(xs, name, pid, sizes):
    return _allgather(xs, name, pid, sizes), None


def _allgather_bwd(name, pid, sizes, _, grads):
    # Horovod's (and tfring.torch's) allgather gradient: the gathered gradients averaged over the ranks, this
    # rank's rows of them (each rank's loss is taken as one term of the mean over the ranks).
    summed = _allreduce(list(grads), name + ".grad", int(Average), 1.0, 1.0, pid)
    me = set_rank(pid)
    return ([g[sum(s[:me]):sum(s[:me + 1])] for g, s in zip(summed, sizes)],)


_allgather.defvjp(_allgather_fwd, _allgather_bwd)


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
    if tracing(*xs):
        return [(x.shape[0],) * n for x in xs]
    mine = jnp.asarray([x.shape[0] for x in xs], dtype=jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)
    every = np.asarray(_finish(lambda: _allgather([mine], fn + ".sizes", pid, ((len(xs),) * n,)), [mine])[0])
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
    pid = _ffi.set_id("grouped_allgather", process_set)
    xs = [_check_array("grouped_allgather", t, "tensors[%d]" % i) for i, t in enumerate(tensors)]
    if not xs:
        return []
    name = _names("allgather", name, pid, xs)
    sizes = _gathered_sizes("allgather", xs, sizes, pid, process_set)
    return _finish(lambda: _allgather(xs, name, pid, tuple(sizes)), xs)


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
