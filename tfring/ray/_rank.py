"""What RayExecutor runs inside its ranks (the persistent processes of a tfring.runner slot job). Imports no Ray:
the ranks only need the functions below, pickled by reference.

Each rank keeps the executable object built at start(). A rank dies with its own actor through the slot launcher's
watchdog (tfring.runner.slots.rank), which also tells the driver which worker (slot) each rank belongs to."""
import os

_STATE = {"executable": None}


def _rank():
    return int(os.environ["OMPI_COMM_WORLD_RANK"])


def setup(env_by_worker, executable_cls, executable_args, executable_kwargs):
    """Sets this rank's variables and builds the executable object (the first call of every job).

    Args:
        env_by_worker: {worker index: {name: value}}: variables to set in the rank of each worker (e.g.
            CUDA_VISIBLE_DEVICES: Ray's GPU ids differ per host).
        executable_cls: the class to instantiate, or None.
        executable_args: its positional arguments.
        executable_kwargs: its keyword arguments.

    Returns:
        dict: {"rank", "pid"}.

    Raises:
        RuntimeError: the rank does not know its worker (the slot launcher could not find its slot).
    """
    from tfring.common.launch_env import SLOT_INDEX
    if SLOT_INDEX not in os.environ:
        raise RuntimeError("tfring.ray: rank %d cannot tell which worker actor it belongs to" % _rank())
    worker = int(os.environ[SLOT_INDEX])
    os.environ.update((env_by_worker or {}).get(worker) or {})
    if executable_cls is not None:
        _STATE["executable"] = executable_cls(*executable_args, **executable_kwargs)
    return {"rank": _rank(), "pid": os.getpid()}


def apply(fn):
    """fn(executable) in this rank (RayExecutor.execute).

    Args:
        fn: a function of one argument.

    Returns:
        object: what fn returned.
    """
    return fn(_STATE["executable"])


def apply_single(fn):
    """fn(executable) on rank 0 only (RayExecutor.execute_single).

    Args:
        fn: a function of one argument.

    Returns:
        object: what fn returned on rank 0, None on the other ranks.
    """
    return fn(_STATE["executable"]) if _rank() == 0 else None
