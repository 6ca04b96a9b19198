"""init/shutdown and topology queries (rank, size, ...), backed by the C runtime."""
import atexit
import ctypes

from tfring import _lib

_atexit_registered = False


def init(comm=None, process_sets=None):
    """Starts tfring on MPI_COMM_WORLD, or on `comm` (an mpi4py communicator or a list of world ranks).
    process_sets: tfring.ProcessSet objects every rank passes alike (Horovod's static process sets)."""
    global _atexit_registered
    from tfring import process_sets as ps_mod
    process_sets = list(process_sets or [])
    _, c = _lib.load()
    if c.tfring_is_initialized():  # idempotent, as Horovod's; sets passed again are looked up
        ps_mod._assign_ids([p for p in process_sets if p.ranks is not None])
        return
    _lib.prepare_mpi_environment()
    from mpi4py import MPI  # initializes MPI (THREAD_MULTIPLE) and finalizes it at interpreter exit
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
    """Starts writing a Chrome-trace timeline (rank 0 writes; open it in Perfetto). Same as TFRING_TIMELINE."""
    c = _lib._c
    if c is None or not is_initialized():
        raise ValueError("tfring.start_timeline: tfring has not been initialized; call tfring.init() first")
    err = ctypes.create_string_buffer(1024)
    if c.tfring_start_timeline(str(file_path).encode(), int(bool(mark_cycles)), err, len(err)) != 0:
        raise ValueError(err.value.decode())


def stop_timeline():
    """Stops the timeline and closes the file (a complete JSON array)."""
    if _lib._c is not None:
        _lib._c.tfring_stop_timeline()


def shutdown():
    """Stops the background thread; pending collectives on every rank fail with an error."""
    if _lib._c is not None:
        _lib._c.tfring_shutdown()


def is_initialized():
    return _lib._c is not None and bool(_lib._c.tfring_is_initialized())


def _query(fn):
    if not is_initialized():
        raise ValueError("tfring has not been initialized; call tfring.init() first")
    return getattr(_lib._c, fn)()


def size():
    return _query("tfring_size")


def rank():
    return _query("tfring_rank")


def local_size():
    return _query("tfring_local_size")


def local_rank():
    return _query("tfring_local_rank")


def cross_size():
    return _query("tfring_cross_size")


def cross_rank():
    return _query("tfring_cross_rank")


def is_homogeneous():
    return bool(_query("tfring_is_homogeneous"))


def tunables():
    """(fusion threshold in bytes, cycle time in ms) in force on this rank now; autotune changes them."""
    return int(_query("tfring_fusion_threshold")), float(_query("tfring_cycle_time_ms"))


def mpi_threads_supported():
    return bool(_query("tfring_mpi_threads_supported"))


def _built(what):
    _, c = _lib.load()
    return bool(c.tfring_built(what.encode()))


def mpi_built():
    return _built("mpi")


def mpi_enabled():
    return mpi_built()


def nccl_built():
    return _built("nccl")


def gloo_built():
    return False


def cuda_built():
    return _built("cuda")


def rocm_built():
    return False


def ccl_built():
    """Intel oneCCL: not a tfring backend."""
    return False


def ddl_built():
    """IBM DDL: not a tfring backend."""
    return False




def gloo_enabled():
    return False


def knob_table():
    """[(name, type, default, doc)] of every TFRING_* setting (HOROVOD_* names are aliases)."""
    _, c = _lib.load()
    rows = c.tfring_knob_table().decode().strip().splitlines()
    return [tuple(r.split("|", 3)) for r in rows]
