"""`run`: Horovod's elastic training loop around a user function."""
import functools

from tfring.common.elastic import membership, world
from tfring.common.errors import HorovodInternalError, HostsUpdatedInterrupt, is_worker_failure

MAX_RESET_TRIES = 8  # resets in a row that may each fail on a further lost worker


def run(func):
    """Decorator: `func(state, ...)` runs until it returns; when a worker fails it is called again on the
    survivors from the last commit, and when hosts are added it is called again with the newcomers.

    On a worker failure (`HorovodInternalError`, or the collective error it comes from): `state.restore()`,
    the survivors shrink the job (no process restarts), `state.on_reset()`, then `state.sync()` and `func` again.
    On `HostsUpdatedInterrupt` (from `state.commit()` / `check_host_updates()`): new ranks are started and
    joined, `state.on_reset()`, `state.sync()` sends them the committed state, and `func` is called again.

    Args:
        func: a function whose first argument is a `tfring.tensorflow.elastic.State`.

    Returns:
        The wrapped function; it returns what `func` returns.

    Raises:
        HorovodInternalError: (from the wrapped function) a worker failed in a job not started in elastic mode
            (`tfringrun` without `--min-np` / `--max-np` / `--host-discovery-script`).
        RuntimeError: (from the wrapped function) fewer than `--min-np` ranks remain and no new slots came within
            `--elastic-timeout`, or `--reset-limit` was reached.
        Exception: anything else `func` raises that is not a worker failure is raised unchanged.
    """
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            failure = False
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            except Exception as e:  # noqa: BLE001 - only worker failures are handled; the rest re-raised
                if not is_worker_failure(e):
                    raise
                if not membership.enabled():
                    raise HorovodInternalError(
                        "tfring.elastic: a worker failed, but this job does not run in elastic mode (start it with "
                        "tfringrun --min-np/--max-np/--host-discovery-script): %s" % e) from e
                state.restore()
                failure, skip_sync = True, False
            for attempt in range(MAX_RESET_TRIES):
                try:
                    world.reset(failure)
                    break
                except Exception as e:  # noqa: BLE001 - another worker failed while the job was rebuilt
                    if not is_worker_failure(e) or attempt + 1 == MAX_RESET_TRIES:
                        raise
                    failure = True  # shrink past it too (each try counts against --reset-limit)
            state.on_reset()
    return wrapper
