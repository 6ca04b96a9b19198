"""What both slot jobs (job.SlotJob, elastic_job.ElasticSlotJob) do under their one lock: wait for a condition with a
deadline while the scheduler is polled, and hold a rank's `/call` until the driver has work for it."""
import time

CALL_WAIT = 5.0  # seconds a rank's /call waits for work before it is told to ask again


def check_seconds(name, value, none=False):
    """Every wait has a deadline: `value` must be a positive, finite number of seconds (None only with `none`).

    Raises:
        ValueError: naming the argument and the value.
    """
    if value is None and none:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")
    if not ok:
        raise ValueError("tfring: %s=%r: expected a positive, finite number of seconds%s" % (
            name, value, " or None" if none else ""))


class LockedWaits:
    """Mixin for a slot job: needs `_cond` (its threading.Condition), `_check()` (run under the lock: raises when the
    job failed), and for calls `_stopping`, `_seq` (the newest call's number) and `_calls` ({number: payload})."""

    def _wait(self, until, deadline, alive, expired):
        # Waits under the lock until `until()` (checked with the lock held), one second at a time; between two
        # waits the lock is released for `alive` (a scheduler call such as ray.wait may block every handler).
        while True:
            with self._cond:
                self._check()
                if until():
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise expired()
                self._cond.wait(min(left, 1.0))
                self._check()
                if until():
                    return
            if alive is not None:
                alive()  # the scheduler's own state: raises when its job failed

    def _post_call(self, payload):
        """Under the lock: makes `payload` the next call every rank fetches; returns its number."""
        self._seq += 1
        self._calls[self._seq] = payload
        self._cond.notify_all()
        return self._seq

    def _wait_for_call(self, after):
        """Under the lock: None once a call newer than `after` exists, else the reply that sends the rank back
        ({"wait": True} after CALL_WAIT s, {"stop": True} when the job stops)."""
        deadline = time.monotonic() + CALL_WAIT
        while not self._stopping and self._seq <= after:
            left = deadline - time.monotonic()
            if left <= 0:
                return {"wait": True}
            self._cond.wait(left)
        return {"stop": True} if self._stopping else None
