"""What RayExecutor runs inside its ranks (the persistent processes of a tfring.runner slot job). Imports no Ray:
the ranks only need the functions below, pickled by reference.

Each rank keeps the executable object built at start() and a watchdog on the Ray actor it belongs to: a rank on the
launcher's host is a child of slot 0's mpirun, not of its own actor, so killing that actor would otherwise leave the
rank running."""
import os
import signal
import sys
import threading
import time

_STATE = {"executable": None, "watchdog": None}
WATCH_PERIOD = 0.5  # seconds between two looks at the actor's process


def _rank():
    return int(os.environ["OMPI_COMM_WORLD_RANK"])


def _start_time(pid):
    # Field 22 of /proc/PID/stat: tells a live actor from a new process that reused its pid.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid, started):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return started is None or _start_time(pid) == started


def _watch(worker, pid, started):
    while _alive(pid, started):
        time.sleep(WATCH_PERIOD)
    sys.stderr.write("tfring.ray: rank %d exits: its Ray actor (worker %d, pid %d) died\n" % (_rank(), worker, pid))
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # mpirun then ends the job: the other ranks cannot go on without this one


def setup(actors, env_by_host, executable_cls, executable_args, executable_kwargs):
    """Ties this rank to its actor and builds the executable object (the first call of every job).

    Args:
        actors: {host identity: [(worker index, actor pid), ...]} in slot order; this rank takes the entry at its
            local rank on its host (mpirun places ranks by slot, host by host).
        env_by_host: {host identity: {name: value}}: variables to set in the ranks of each host (e.g.
            CUDA_VISIBLE_DEVICES: Ray's GPU ids differ per host).
        executable_cls: the class to instantiate, or None.
        executable_args: its positional arguments.
        executable_kwargs: its keyword arguments.

    Returns:
        dict: {"rank", "worker", "pid", "host"}: which worker this rank belongs to.

    Raises:
        RuntimeError: this rank's host has fewer actors than ranks (the placement is not the expected one).
    """
    from tfring.runner.slot_task import host_identity
    host, local = host_identity(), int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    mine = actors.get(host) or []
    if local >= len(mine):
        raise RuntimeError("tfring.ray: rank %d is local rank %d on host %s, which has %d worker actor(s)" % (
            _rank(), local, host, len(mine)))
    worker, pid = mine[local]
    os.environ.update((env_by_host or {}).get(host) or {})
    if _STATE["watchdog"] is None:
        _STATE["watchdog"] = threading.Thread(target=_watch, args=(worker, pid, _start_time(pid)),
                                              name="tfring-ray-watchdog", daemon=True)
        _STATE["watchdog"].start()
    if executable_cls is not None:
        _STATE["executable"] = executable_cls(*executable_args, **executable_kwargs)
    return {"rank": _rank(), "worker": worker, "pid": os.getpid(), "host": host}


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
