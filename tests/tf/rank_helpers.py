"""Deterministic per-rank inputs so every rank can compute every other rank's contribution; the runtime restarted
for one file of a shared launch."""
import contextlib
import os

import numpy as np
import tensorflow as tf

import tfring as hvd

NUMERIC = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
           tf.float64]
ANY = NUMERIC + [tf.bool]
SHAPES = [(), (0,), (3,), (2, 3, 4)]


def value(r, shape, dtype):
    """Small integer-valued data (exact in every dtype, no overflow in a product of 3 ranks)."""
    n = int(np.prod(shape)) if shape else 1
    base = (np.arange(n) % 3 + r + 1).reshape(shape)
    if dtype == tf.bool:
        return (base % 2).astype(bool)
    return base.astype(np.float64)


def tensor(r, shape, dtype):
    return tf.cast(tf.constant(value(r, shape, dtype)), dtype)


def as_np(t):
    t = tf.convert_to_tensor(t)
    if t.dtype == tf.bfloat16 or t.dtype == tf.float16:
        t = tf.cast(t, tf.float64)
    return t.numpy()


def tolerance(dtype):
    return {tf.float16: 1e-3, tf.bfloat16: 1e-2}.get(dtype, 0)


def init():
    if not hvd.is_initialized():
        hvd.init()
    return hvd.rank(), hvd.size()


def all_ranks_here():
    """Waits for every rank. tfring's barrier while tfring runs: a rank that fails and exits shuts it down, which
    ends the wait on the others; MPI's otherwise."""
    from mpi4py import MPI
    if hvd.is_initialized() and hvd.size() == MPI.COMM_WORLD.size:
        hvd.barrier()
    else:
        MPI.COMM_WORLD.Barrier()


def _set_env(values):
    """Sets each variable to its value; None removes it."""
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextlib.contextmanager
def restarted(env=None, process_sets=None, start=True):
    """The runtime restarted for one rank file, then the plain one again for the next file of the launch.

    The files of a launch share one pytest process per rank, which imports (collects) them all before any test
    runs: a file that needs settings of its own (TFRING_* knobs, read at init), process sets or no runtime at all
    gets them from a module-scoped autouse fixture around this, never at import. Every rank runs the same files in
    the same order, so the collective shutdown/init calls line up; each waits for every rank first, since one
    rank's shutdown ends the collectives still running on the others (e.g. among a set this rank is not in).

    Args:
        env: variables set while the file runs (None: removed), restored afterwards.
        process_sets: passed to init().
        start: init() before the file's tests (False: they start with tfring shut down and init it themselves).
    """
    from mpi4py import MPI
    env = {k: None if v is None else str(v) for k, v in (env or {}).items()}
    saved = {k: os.environ.get(k) for k in env}
    all_ranks_here()
    hvd.shutdown()
    _set_env(env)
    try:
        if start:
            hvd.init(process_sets=process_sets)
        yield
    finally:
        # MPI's barrier: the file's tests may have left tfring on a sub-communicator or shut down.
        MPI.COMM_WORLD.Barrier()
        hvd.shutdown()
        _set_env(saved)
        hvd.init()
