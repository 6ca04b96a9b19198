"""Who this rank runs with in an elastic job: the communicator tfring starts on (MPI_COMM_WORLD, or for a process a
running job spawned, its merge with the parents), the job's settings from the launcher, its signed client, and the
exit report. `tfring.common.basics.init` reads it; `tfring.common.elastic.world` changes it."""
import atexit
import json
import os
import signal
import socket
import sys
import threading

from tfring.common import knobs, launch_env, library
from tfring.common.elastic import protocol
from tfring.common.signed_channel import client_from_env

_lock = threading.Lock()
_base = None  # the mpi4py communicator tfring runs on
failed = False  # a worker failure happened: leave without MPI_Finalize (set by world.reset)
_events = {"resets": 0, "ranks_lost": 0, "ranks_added": 0}  # this process's resets (world.reset counts them)


def events():
    """{"resets", "ranks_lost", "ranks_added"}: the elastic resets this process went through, the ranks they lost
    (shrinks) and added (spawns); the metrics endpoint's elastic series."""
    return dict(_events)


def count(**events):
    """Adds to the reset counts (world.reset, once per reset)."""
    for name, n in events.items():
        _events[name] += n


def enabled():
    """Whether this process runs under `tfringrun` in elastic mode.

    Returns:
        bool
    """
    return launch_env.elastic_enabled()


def min_np():
    return launch_env.int_value(launch_env.ELASTIC_MIN_NP, 1)


def max_np():
    return launch_env.int_value(launch_env.ELASTIC_MAX_NP, 0)


def timeout():
    return int(knobs.value(launch_env.ELASTIC_TIMEOUT)[0])


def reset_limit():
    return launch_env.int_value(launch_env.ELASTIC_RESET_LIMIT, -1)


def client():
    """The launcher's signed client, or None (run under `mpirun --with-ft ulfm` directly: survives failures,
    cannot grow)."""
    if not os.environ.get(launch_env.ELASTIC_DRIVER):
        return None
    drivers = json.loads(os.environ.get(launch_env.ELASTIC_DRIVERS) or "{}")  # set for spawned processes, by host
    address = drivers.get(host_name())
    return client_from_env(dict(os.environ, **{launch_env.ELASTIC_DRIVER: address}) if address else None)


def host_name():
    """This rank's host as the launcher named it (PRRTE's PMIX_HOSTNAME), else the machine's name."""
    return os.environ.get("PMIX_HOSTNAME") or socket.gethostname()


def base_comm():
    """The communicator tfring runs on in an elastic job: MPI_COMM_WORLD, or for a process spawned by a
    running job, its merge with the parents (the newcomers take the highest ranks)."""
    global _base
    with _lock:
        if _base is not None:
            return _base
        from mpi4py import MPI
        parent = MPI.Comm.Get_parent()
        _spawned.append(parent != MPI.COMM_NULL)
        _base = base = parent.Merge(high=True) if parent != MPI.COMM_NULL else MPI.COMM_WORLD
        sys.exit = _record_exit(sys.exit)
        atexit.register(_at_exit)  # after mpi4py's (it runs first): before MPI_Finalize
    _report_start(base)
    return base


def _launch():
    """The launcher's mpirun run this process belongs to (None: not numbered, or a process a growth spawned
    without it)."""
    value = os.environ.get(launch_env.ELASTIC_LAUNCH, "")
    return int(value) if value.isdigit() else None


def _report_start(comm):
    """Tells the launcher this rank runs tfring, so that a job whose ranks all end without an exit report (inside
    MPI: Open MPI exits a rank waiting in ULFM's shrink when the awaited peer dies, and mpirun then exits 0) is
    reported as unfinished, not as a success."""
    try:
        signed = client()
        if signed is not None:
            signed.call(protocol.START, protocol.start_request(comm.rank, comm.size, _launch()))
    except Exception as e:  # noqa: BLE001 - the launcher unreachable: mpirun's status stands
        sys.stderr.write("tfring.elastic: could not report this rank's start: %s\n" % e)


_spawned = []


def spawned():
    """Whether this process joined a running job (started by a growth's MPI_Comm_spawn), as seen at init."""
    return bool(_spawned and _spawned[0])


def set_base(comm):
    """The communicator after a reset (world.reset)."""
    global _base
    with _lock:
        _base = comm


_exit_code = []


def _record_exit(original):
    def exit(code=None):  # noqa: A001 - sys.exit's name
        _exit_code.append(0 if code is None else code if isinstance(code, int) else 1)
        original(code)
    return exit


def _at_exit():
    """At exit of an elastic rank: tells the launcher this rank's status, so that tfringrun can tell a job whose
    every rank finished from one that failed when mpirun itself dies in its teardown (an Open MPI 5.0.11 defect
    after a spawn onto an added host, docs/elastic.md). After a worker failure, also leaves without MPI_Finalize:
    it can hang after a process failure (seen here in about 1 of 10 runs; cf. open-mpi/ompi#11404), and under
    `--with-ft ulfm` a process that exits without it still counts as a success (measured). The status is the
    script's: 1 after an uncaught exception, sys.exit()'s code, else 0."""
    code = _exit_code[-1] if _exit_code else (1 if getattr(sys, "last_value", None) is not None else 0)
    reported = []
    try:
        core = library.loaded()
        if core is not None:
            core.tfring_shutdown()  # the background thread stops before MPI_Finalize
        signed = client()
        if signed is not None and _base is not None:
            try:
                signed.call(protocol.EXIT, protocol.exit_request(_base.rank, _base.size, code, _launch()))
                reported.append(True)
            except Exception as e:  # noqa: BLE001 - the launcher gone or unreachable: mpirun's status stands
                sys.stderr.write("tfring.elastic: could not report this rank's exit: %s\n" % e)
    finally:
        if reported and not failed:
            _finalize_deadline()
        if failed:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(code)


FINALIZE_MIN_SECONDS = 10


def _finalize_deadline():
    """MPI_Finalize (mpi4py's, after the exit handlers) can wait forever for a peer that stopped without dying (seen:
    two ranks spinning 35 min in its ULFM agreement with a SIGSTOPped peer). This rank's status is reported by
    then (armed only after the launcher took the report): SIGALRM's default action ends the process if it has not
    exited within the stall shutdown time (at least FINALIZE_MIN_SECONDS); no deadline with the stall inspector
    off."""
    try:
        seconds = knobs.stall_shutdown_seconds()
        if seconds > 0 and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(max(FINALIZE_MIN_SECONDS, int(seconds + 0.999)))
    except (ValueError, OSError, OverflowError):
        pass  # a malformed value was reported at init; no deadline then
