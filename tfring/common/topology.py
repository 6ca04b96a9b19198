"""Topology and build queries (rank, size, local_rank, ..., nccl_built, knob_table), backed by the C runtime.
They never load the core: before any binding loaded it, tfring is not initialized."""
from tfring.common import library as _lib

__all__ = ["ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled",
           "is_homogeneous", "is_initialized", "knob_table", "local_rank", "local_size", "min_cores_per_rank",
           "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "rank", "rocm_built", "size", "tunables"]


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


def min_cores_per_rank():
    """The fewest logical CPUs per rank on any host of the job, agreed at init (every rank reads the same value):
    on each host, the CPUs its ranks may run on together (the union of their affinity masks, capped by a cgroup
    CPU quota) divided by its ranks; the minimum over hosts.

    Returns:
        float

    Raises:
        ValueError: tfring is not initialized.
    """
    return _query("tfring_min_cpu_milli_per_rank") / 1000.0


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
    """Every TFRING_* environment setting tfring reads (each also read as HOROVOD_*): the runtime's, and the few its
    Python side reads (the launcher, the Spark driver, TF's gradient overlap). tfring.common.knobs has the whole
    rows (range, launcher flag, config-file key).

    Returns:
        list: (name, type, default, description) tuples of strings.
    """
    from tfring.common import knobs
    return [(k.name, k.type, k.default, k.doc) for k in knobs.table()]
