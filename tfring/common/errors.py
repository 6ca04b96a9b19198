"""The two interruptions of an elastic job, under Horovod's names."""

# What the C++ core says (status WORKERS_FAILED, a tf.errors.UnavailableError) when a peer died or left.
WORKERS_FAILED_MARK = "tfring: a worker process failed or left the job"


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
    return isinstance(exc, HorovodInternalError) or WORKERS_FAILED_MARK in str(exc)
