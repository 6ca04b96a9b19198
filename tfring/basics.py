"""init/shutdown and topology queries (rank, size, ...), backed by the C runtime."""
import atexit
import ctypes
import sys

from tfring import _lib

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
    from tfring import process_sets as ps_mod
    process_sets = list(process_sets or [])
    c = _lib.core()
    if "tensorflow" in sys.modules and _lib.has_tf_library():
        _lib.load()  # a TensorFlow user: its ops registered from init on, as Horovod's import does
    if c.tfring_is_initialized():  # idempotent, as Horovod's; sets passed again are looked up
        ps_mod._assign_ids([p for p in process_sets if p.ranks is not None])
        return
    _lib.prepare_mpi_environment()
    from mpi4py import MPI  # initializes MPI (THREAD_MULTIPLE) and finalizes it at interpreter exit
    from tfring.elastic import _world
    if comm is None and _world.enabled():
        comm = _world.base_comm()  # an elastic job's current membership (a spawned rank merges in here)
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
    if not _atexit_registered:
        atexit.register(shutdown)  # runs before mpi4py's MPI_Finalize
        _atexit_registered = True


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
    if _lib._c is not None:
        _lib._c.tfring_shutdown()
    for hook in _shutdown_hooks:  # also on an elastic reset, which restarts the runtime through here
        hook()


def is_initialized():
    """Whether `init()` ran and `shutdown()` did not.

    Returns:
        bool
    """
    return _lib._c is not None and bool(_lib._c.tfring_is_initialized())


def _query(fn):
    if not is_initialized():
        raise ValueError("tfring has not been initialized; call tfring.init() first")
    return getattr(_lib._c, fn)()


def size():
    """The number of ranks in the job.

    Returns:
        int

    Raises:
        ValueError: tfring is not initialized.
    """
    return _query("tfring_size")


def rank():
    """This process's rank, 0 to size() - 1.

    Returns:
        int

    Raises:
        ValueError: tfring is not initialized.
    """
    return _query("tfring_rank")


def local_size():
    """The number of ranks on this host.

    Returns:
        int

    Raises:
        ValueError: tfring is not initialized.
    """
    return _query("tfring_local_size")


def local_rank():
    """This process's rank among the ranks on this host (pin a device with it).

    Returns:
        int

    Raises:
        ValueError: tfring is not initialized.
    """
    return _query("tfring_local_rank")


def cross_size():
    """The number of ranks with this process's local rank (one per host when every host runs as
    many ranks).

    Returns:
        int

    Raises:
        ValueError: tfring is not initialized.
    """
    return _query("tfring_cross_size")


def cross_rank():
    """This process's rank among the ranks with its local rank (its host's index when every host
    runs as many ranks).

    Returns:
        int

    Raises:
        ValueError: tfring is not initialized.
    """
    return _query("tfring_cross_rank")


def is_homogeneous():
    """Whether every host runs the same number of ranks.

    Returns:
        bool

    Raises:
        ValueError: tfring is not initialized.
    """
    return bool(_query("tfring_is_homogeneous"))


def tunables():
    """The tunable settings in force on this rank now (TFRING_AUTOTUNE=1 changes them while training).

    Returns:
        tuple: (fusion threshold in bytes, cycle time in ms).

    Raises:
        ValueError: tfring is not initialized.
    """
    return int(_query("tfring_fusion_threshold")), float(_query("tfring_cycle_time_ms"))


def mpi_threads_supported():
    """Whether MPI was initialized with MPI_THREAD_MULTIPLE.

    Returns:
        bool

    Raises:
        ValueError: tfring is not initialized.
    """
    return bool(_query("tfring_mpi_threads_supported"))


def _built(what):
    c = _lib.core()
    return bool(c.tfring_built(what.encode()))


def mpi_built():
    """Whether the op library was built with MPI (always: MPI is tfring's only controller).

    Returns:
        bool
    """
    return _built("mpi")


def mpi_enabled():
    """Whether MPI is in use (the same as `mpi_built()`).

    Returns:
        bool
    """
    return mpi_built()


def nccl_built():
    """Whether this build has the GPU (NCCL) path.

    Returns:
        bool
    """
    return _built("nccl")


def gloo_built():
    """Gloo is not a tfring controller.

    Returns:
        bool: False
    """
    return False


def cuda_built():
    """Whether this build was compiled with CUDA (the NCCL path).

    Returns:
        bool
    """
    return _built("cuda")


def rocm_built():
    """ROCm is not supported.

    Returns:
        bool: False
    """
    return False


def ccl_built():
    """Intel oneCCL is not a tfring backend.

    Returns:
        bool: False
    """
    return False


def ddl_built():
    """IBM DDL is not a tfring backend.

    Returns:
        bool: False
    """
    return False


def gloo_enabled():
    """Gloo is not a tfring controller.

    Returns:
        bool: False
    """
    return False


def knob_table():
    """Every TFRING_* environment setting the runtime reads (each also read as HOROVOD_*).

    Returns:
        list: (name, type, default, description) tuples of strings.
    """
    c = _lib.core()
    rows = c.tfring_knob_table().decode().strip().splitlines()
    return [tuple(r.split("|", 3)) for r in rows]
