"""The two interruptions of an elastic job, under Horovod's names, and the one mapping of the core's status codes
to Python exceptions (the codes and the WORKERS_FAILED text read from the core, as the reduce ops are)."""
import functools

from tfring.common import library


class HorovodInternalError(RuntimeError):
    """A collective failed because a worker died or left: roll back to the last commit and go on without it."""


class HostsUpdatedInterrupt(RuntimeError):
    """The driver reported new hosts (raised on every rank alike by `commit()` / `check_host_updates()`).

    Args:
        skip_sync: True when no rank joins (nothing to broadcast after the reset).
    """

    def __init__(self, skip_sync=False):
        super().__init__("tfring.elastic: the job's hosts changed")
        self.skip_sync = skip_sync


WorkersFailedError = HorovodInternalError  # tfring's own name for it


def is_worker_failure(exc):
    """Whether an exception from a collective means a worker failed (tfring's WORKERS_FAILED status).

    Args:
        exc: any exception.

    Returns:
        bool
    """
    return isinstance(exc, HorovodInternalError) or workers_failed_mark() in str(exc)


@functools.lru_cache(maxsize=None)
def workers_failed_mark():
    """How the core starts every WORKERS_FAILED message (TensorFlow's errors carry only the text).

    Returns:
        str
    """
    return library.core().tfring_workers_failed_mark().decode()


@functools.lru_cache(maxsize=None)
def status_code(name):
    """The core's value of a status code (cc/common/status.h).

    Args:
        name: "INVALID_ARGUMENT", "WORKERS_FAILED", ...

    Returns:
        int

    Raises:
        ImportError: the core does not know the name (a stale build).
    """
    value = library.core().tfring_status_code(name.encode())
    if value < 0:
        raise ImportError("tfring's core library does not know the status %r; rebuild tfring. %s"
                          % (name, library.REBUILD))
    return value


def status_error(code, message, invalid_argument=ValueError, other=RuntimeError):
    """The exception for a status code a binding's extension returned, the same rule for every binding:
    INVALID_ARGUMENT -> `invalid_argument`, WORKERS_FAILED -> HorovodInternalError (elastic jobs roll back on
    it), anything else -> `other`.

    Args:
        code: the core's status code (not OK).
        message: the core's message.
        invalid_argument: the binding's class for bad arguments (default ValueError).
        other: the binding's class for every other failure (default RuntimeError).

    Returns:
        Exception: to raise.
    """
    if code == status_code("INVALID_ARGUMENT"):
        return invalid_argument(message)
    if code == status_code("WORKERS_FAILED"):
        return HorovodInternalError(message)
    return other(message)
