"""init/shutdown and the timeline, backed by the C runtime; the topology queries (rank, size, ...) are
tfring.common.topology's, re-exported here."""
import atexit
import ctypes

from tfring.common import library as _lib
from tfring.common import metrics_endpoint
from tfring.common import process_sets as ps_mod
from tfring.common.elastic import ender, membership
from tfring.common import topology as _topology
from tfring.common.topology import *  # noqa: F401,F403 (rank, size, ...: Horovod has them beside init)
from tfring.common.topology import is_initialized

# Horovod's basics, listed once: every binding (and tfring.keras) re-exports exactly these with
# `from tfring.common.basics import *`.
__all__ = ["init", "shutdown", "start_timeline", "stop_timeline"] + list(_topology.__all__)

_atexit_registered = False


def init(comm=None, process_sets=None):
    """Starts tfring: MPI (if not yet initialized) and the background thread that runs the collectives.

    Every rank calls it. Calling it again does nothing (sets passed again get their ids). A script run without a
    launcher is a job of one rank. tfring shuts down by itself at interpreter exit.

    Args:
        comm: run on MPI_COMM_WORLD (None), on an mpi4py communicator, or on a list of MPI_COMM_WORLD ranks
            (a process outside it gets a ValueError).
        process_sets: `tfring.ProcessSet` objects to register (Horovod's static process sets); every rank passes
            the same list.

    Raises:
        ValueError: `comm` is MPI.COMM_NULL, excludes this process or holds bad ranks, or a process set is
            invalid on some rank.
        TypeError: `comm` is neither a communicator nor a list.
        RuntimeError: the runtime failed to start.
    """
    global _atexit_registered
    process_sets = list(process_sets or [])
    c = _lib.core()
    if c.tfring_is_initialized():  # idempotent, as Horovod's; sets passed again are looked up
        ps_mod._assign_ids([p for p in process_sets if p.ranks is not None])
        return
    _lib.prepare_mpi_environment()
    from mpi4py import MPI  # initializes MPI (THREAD_MULTIPLE) and finalizes it at interpreter exit
    if comm is None and membership.enabled():
        comm = membership.base_comm()  # an elastic job's current membership (a spawned rank merges in here)
    if comm is None:
        handle = -1
    elif isinstance(comm, MPI.Comm):
        if comm == MPI.COMM_NULL:
            raise ValueError("tfring.init: comm=MPI.COMM_NULL; this process is not in the communicator")
        handle = comm.py2f()
    elif isinstance(comm, (list, tuple)):
        world = MPI.COMM_WORLD
        bad = [r for r in comm if not isinstance(r, int) or not 0 <= r < world.size]
        if bad or not comm:
            raise ValueError("tfring.init: comm=%r must be a non-empty list of ranks in [0, %d)" % (comm, world.size))
        sub = world.Create_group(world.group.Incl(sorted(set(comm))))
        if sub == MPI.COMM_NULL:
            raise ValueError("tfring.init: this process (world rank %d) is not in comm=%r" % (world.rank, comm))
        handle = sub.py2f()
    else:
        raise TypeError("tfring.init: comm must be an mpi4py communicator or a list of ranks, got %r" % (comm,))
    base = MPI.COMM_WORLD if handle == -1 else MPI.Comm.f2py(handle)
    lists = ps_mod._resolve_static(process_sets, base)
    flat = [r for ranks in lists for r in ranks]
    sets = (ctypes.c_int * max(len(flat), 1))(*flat)
    sizes = (ctypes.c_int * max(len(lists), 1))(*[len(r) for r in lists])
    err = ctypes.create_string_buffer(1024)
    if c.tfring_init_with_sets(handle, sets, sizes, len(lists), err, len(err)) != 0:
        msg = err.value.decode()
        raise (ValueError if "process_sets" in msg else RuntimeError)(msg)
    ps_mod._assign_ids(process_sets)
    if membership.enabled():
        ender.install(c)  # a silent rank alone on its host is ended through the launcher
    if not _atexit_registered:
        atexit.register(shutdown)  # runs before mpi4py's MPI_Finalize
        _atexit_registered = True
    metrics_endpoint.on_init()  # rank 0's Prometheus endpoint, when TFRING_METRICS_PORT is set


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline of the collectives (rank 0 writes it; open it in Perfetto).

    The same as setting TFRING_TIMELINE (launcher: `--timeline-filename`).

    Args:
        file_path: the JSON file to write.
        mark_cycles: also mark every background-thread cycle.

    Raises:
        ValueError: tfring is not initialized, or the file cannot be opened.
    """
    c = _lib._c
    if c is None or not is_initialized():
        raise ValueError("tfring.start_timeline: tfring has not been initialized; call tfring.init() first")
    err = ctypes.create_string_buffer(1024)
    if c.tfring_start_timeline(str(file_path).encode(), int(bool(mark_cycles)), err, len(err)) != 0:
        raise ValueError(err.value.decode())


def stop_timeline():
    """Stops the timeline and closes its file (a complete JSON array). Does nothing when none is running."""
    if _lib._c is not None:
        _lib._c.tfring_stop_timeline()


_shutdown_hooks = []  # bindings' per-run state (e.g. tfring.torch's handles and names), cleared at each shutdown


def shutdown():
    """Stops the background thread; collectives still pending fail with an error. `init()` may follow."""
    metrics_endpoint.on_shutdown()
    if _lib._c is not None:
        _lib._c.tfring_shutdown()
    for hook in _shutdown_hooks:  # also on an elastic reset, which restarts the runtime through here
        hook()


