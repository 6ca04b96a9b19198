"""tfring.jax's door to the core: loads tfring's XLA FFI handlers, registers them with JAX and calls them
(eagerly or inside jax.jit); names unnamed collectives, checks arrays and maps the core's errors for the
collective modules (_reduce, _gather, _reducescatter).

Every call has a side effect for XLA (`has_side_effect=True`): a collective whose result is unused still runs,
and two identical ones are never merged into one, so every rank submits the same collectives.

Shapes inside jax.jit are fixed when the program is traced, so a collective whose output size depends on other
ranks (allgather with different first dimensions, alltoall with splits) needs those sizes then: eagerly they are
exchanged first; inside jax.jit pass them (`sizes=`, `received_splits=`), else every rank is assumed to send as
many rows as this one (a mismatch is an error on the rank that sees it, never a wrong answer).
"""
import ctypes
import hashlib
import itertools
import threading
import weakref

import jax
import jax._src.core as jax_core
import jax._src.effects as jax_effects
import jax._src.ffi as jax_ffi_internal
import jax.numpy as jnp
import numpy as np

from tfring.common import library as _lib
from tfring.common import names as core_names
from tfring.common.errors import HorovodInternalError, status_error
from tfring.common import topology
from tfring.common.process_sets import process_set_id_of, process_set_of, process_set_rank

_TARGETS = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")
JOIN, BARRIER = 5, 6  # the core's control ops


def _load():
    lib = _lib.load_extension("jax", jax.__version__, "jax", "_tfring_jax*.so", ctypes.CDLL)
    for name in _TARGETS:
        symbol = getattr(lib, "tfring_jax_" + name)
        jax.ffi.register_ffi_target("tfring_" + name, jax.ffi.pycapsule(symbol), platform="cpu")
        gpu = getattr(lib, "tfring_jax_gpu_" + name, None)  # NCCL builds only (handlers_gpu.cc; docs/gpu.md)
        if gpu is not None:
            jax.ffi.register_ffi_target("tfring_" + name, jax.ffi.pycapsule(gpu), platform="CUDA")
    lib.tfring_jax_control.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
                                       ctypes.c_int]
    return lib


_C = _load()  # kept alive for the process: the registered targets point into it
# jax.checkpoint (remat) of a function with collectives: the FFI's effect is safe to recompute around.
jax_effects.remat_allowed_effects.add_type(jax_ffi_internal.FfiEffect)

_scope_lock = threading.Lock()
# A naming scope per root trace, keyed by the trace object itself, held weakly: keyed by id(), a new trace could
# reuse a freed one's id on one rank and continue its count there (ranks then named the same collective differently
# and stalled). Tokens are never reused; the core drops a token's counts when its trace is freed.
_scopes = weakref.WeakKeyDictionary()
_serial = itertools.count(1)


def root_trace(trace):
    """The outermost trace above `trace` that is not the eager one: a jit's trace, not the trace of a lax.cond
    branch or jax.grad inside it, so collectives in two branches or two grads of one function number apart."""
    root = trace
    while getattr(trace, "parent_trace", None) is not None:
        trace = trace.parent_trace
        if type(trace).__name__ != "EvalTrace":
            root = trace
    return root


def _scope(trace):
    root = root_trace(trace)
    with _scope_lock:
        token = _scopes.get(root)
        if token is None:
            token = _scopes[root] = "trace.%d" % next(_serial)
            weakref.finalize(root, core_names.release_scope, token).atexit = False
    return token


def auto_name(kind, process_set_id, trace, signature):
    """`<kind>.noname.<n>.<signature hash>` for a collective traced without a name: the core's unnamed name
    (tfring.common.names) counted in the trace's scope (see root_trace), so every rank that traces the same function
    names alike, however often it traced it before. The core restarts the counts at every init."""
    digest = hashlib.sha1(signature.encode()).hexdigest()[:8]
    return "%s.%s" % (core_names.unnamed(kind, process_set_id, _scope(trace)), digest)


def set_id(fn, process_set):
    return process_set_id_of(process_set, fn)


def root_is_me(root, pid):
    """Whether this process is `root` (a global rank, as Horovod's root ranks)."""
    return topology.rank() == root


def call(kind, operands, results, **attrs):
    """Runs the `tfring_<kind>` handler on `operands`; `results` are ShapeDtypeStructs. Returns the results."""
    typed = {k: (np.int64(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                 else np.float64(v) if isinstance(v, float) else v) for k, v in attrs.items()}
    aliases = {i: i for i in range(len(operands))} if kind in ("allreduce", "broadcast") else None
    fn = jax.ffi.ffi_call("tfring_" + kind, results, has_side_effect=True, vmap_method="sequential",
                          input_output_aliases=aliases)
    out = fn(*operands, **typed)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def tracing(*arrays):
    """Whether a trace is active (jax.jit, grad, vmap; also for concrete arrays a traced function closes over):
    sizes must then be static, and the call is part of a compiled program."""
    return not jax_core.trace_state_clean() or any(isinstance(a, jax.core.Tracer) for a in arrays)


def names(kind, name, pid, arrays):
    if name is not None:
        return str(name)
    # Eager calls block until done, so one name per kind is reused (each distinct name compiles a program).
    if not tracing(*arrays):
        return "%s.noname.eager" % kind
    # Numbered within the trace that contains the call (a rank that traces again, e.g. for a smaller last
    # batch, numbers alike), plus the operands' signature.
    sig = ",".join("%s%s" % (a.dtype, tuple(a.shape)) for a in arrays)
    return auto_name(kind, pid, jax_core.trace_ctx.trace, sig)


def check_array(fn, x, arg="tensor"):
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError("tfring.jax.%s: %s must be a JAX array, got %s" % (fn, arg, type(x).__name__))
    return jnp.asarray(x)


def finish(thunk, arrays):
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
    return process_set_rank(process_set_of(pid))


def rows(d0, n):
    return [d0 // n + (1 if i < d0 % n else 0) for i in range(n)]


def control(op, process_set_id):
    """join (returns the last rank to join) or barrier, blocking without the GIL, after every computation this
    process dispatched has run its collectives (a step still in flight must not meet a joined rank)."""
    jax.effects_barrier()
    result = ctypes.c_int(-1)
    err = ctypes.create_string_buffer(4096)
    code = _C.tfring_jax_control(op, process_set_id, ctypes.byref(result), err, len(err))
    if code != 0:
        raise status_error(code, err.value.decode(errors="replace"))
    return result.value
