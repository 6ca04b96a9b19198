"""Loads tfring's XLA FFI handlers, registers them with JAX, and calls them (eagerly or inside jax.jit).

Every call has a side effect for XLA (`has_side_effect=True`): a collective whose result is unused still runs,
and two identical ones are never merged into one, so every rank submits the same collectives.
"""
import ctypes
import hashlib
import itertools
import threading
import weakref

import jax
import jax._src.effects as jax_effects
import jax._src.ffi as jax_ffi_internal
import numpy as np

from tfring.common import library as _lib
from tfring.common import names
from tfring.common.errors import status_error
from tfring.common import topology
from tfring.common.process_sets import global_process_set, process_set_id_of, process_set_of

_TARGETS = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")
_JOIN, _BARRIER = 5, 6


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
            weakref.finalize(root, names.release_scope, token).atexit = False
    return token


def auto_name(kind, process_set_id, trace, signature):
    """`<kind>.noname.<n>.<signature hash>` for a collective traced without a name: the core's unnamed name
    (tfring.common.names) counted in the trace's scope (see root_trace), so every rank that traces the same function
    names alike, however often it traced it before. The core restarts the counts at every init."""
    digest = hashlib.sha1(signature.encode()).hexdigest()[:8]
    return "%s.%s" % (names.unnamed(kind, process_set_id, _scope(trace)), digest)


def set_id(fn, process_set):
    return process_set_id_of(process_set, fn)


def process_set(pid):
    return global_process_set if pid == 0 else process_set_of(pid)


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
