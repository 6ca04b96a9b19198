"""tfring for JAX: Horovod's API on JAX arrays, eagerly and inside jax.jit (XLA FFI on CPU, zero copy), on the
same runtime as the other bindings (no TensorFlow needed).

    import tfring.jax as hvd
    hvd.init()
    params = hvd.broadcast_parameters(params, root_rank=0)
    tx = hvd.DistributedOptimizer(optax.adam(1e-3))          # gradients averaged over the ranks

    @jax.jit
    def step(params, opt_state, batch):
        grads = jax.grad(loss)(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state
"""
from tfring.common import basics as _basics
from tfring.common.basics import *  # noqa: F401,F403 (Horovod's basics: init, rank, size, ..., listed there)
from tfring.common.monitor import label_tensor, mark_step, metrics, straggler  # noqa: F401
from tfring.common.errors import HorovodInternalError  # noqa: F401
from tfring.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                        remove_process_set)
from tfring.common.reduce_ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from tfring.jax.mpi_ops import (allgather, allreduce, alltoall, barrier, broadcast, grouped_allgather,  # noqa: F401
                                grouped_allreduce, grouped_broadcast, grouped_reducescatter, join, reducescatter)
from tfring.jax.compression import Compression  # noqa: F401
from tfring.jax.functions import allgather_object, broadcast_object, broadcast_parameters  # noqa: F401
from tfring.jax.optimizer import DistributedOptimizer, allreduce_gradients  # noqa: F401


_exit_wait_registered = False


def _wait_for_dispatched_work_at_exit():
    # Registered after tfring's own atexit shutdown, so it runs first: steps still in flight finish their
    # collectives on every rank instead of failing with "tfring has been shut down".
    import jax
    try:
        jax.effects_barrier()
    except Exception as e:  # noqa: BLE001 - exit goes on; say what failed
        print("tfring.jax: JAX work still pending at exit failed: %s" % e, flush=True)


def init(comm=None, process_sets=None):
    """Starts tfring (see `tfring.common.basics.init`); unnamed collectives are numbered afresh.

    Args:
        comm: run on MPI_COMM_WORLD (None), on an mpi4py communicator, or on a list of MPI_COMM_WORLD ranks.
        process_sets: `ProcessSet` objects to register; every rank passes the same list.
    """
    global _exit_wait_registered
    _basics.init(comm, process_sets)
    if not _exit_wait_registered:
        import atexit
        atexit.register(_wait_for_dispatched_work_at_exit)
        _exit_wait_registered = True
