"""The slot launcher's driver side: runs one tfring job on processes some scheduler (Spark tasks, Ray actors)
already started on the cluster ("slots"), so that the ranks are children of those processes, not of the driver.

    job = SlotJob(num_slots, bind_host).start()        # the driver service (tfring.common.signed_channel: HMAC'd JSON)
    ... the scheduler starts num_slots processes that each call
        tfring.runner.slots.task.serve_slot(job.address, job.secret, index) ...
    job.wait_ready(timeout)                            # every slot registered, slot 0 took the job (else LaunchError)
    results = job.call(fn, args, kwargs, timeout=None) # each rank's return value, in rank order (any number of calls)
    job.slot_of(rank)                                  # which slot each rank belongs to (after a call)
    job.stop(); job.close()

Slot 0 is the launcher: it runs mpirun (built by tfring.runner.mpirun.plan, so it gets the usual flags) with its
own host as `localhost` and every other host under a made-up name (tfring-slot-host-N) that PRRTE launches
through tfring.runner.slots.agent: the agent asks that host's first slot to run the PRRTE daemon as its child. The
ranks run tfring.runner.slots.rank, which fetches calls from this service and posts results back. Why mpirun runs
in slot 0 and not in the driver: PRRTE 3.0 never uses loopback for a remote daemon's out-of-band channel, so a job
on one machine (Spark local mode) would have to send its daemons' traffic over a real interface; with mpirun in a
slot, the ranks of the launcher's host are local to mpirun and one host needs no daemon at all.

Each rank dies with its own slot (the rank's watchdog: on a host, ranks take the host's slots in local rank order)
and tells the driver which slot it belongs to. A call in which a rank raised fails with RankError; if some other
rank did not return within SETTLE seconds (blocked in a collective?), the job is broken and later calls fail at
once. No lost message leaves a wait open: the launch spec and mpirun's exit are repeated until acknowledged
(service.py), and every wait here has a deadline."""
import time

from tfring.runner.slots.service import SlotService
from tfring.runner.slots.waits import check_seconds
from tfring.runner.slots.wire import decode, encode

SLOT_SILENCE = 30.0  # seconds without a slot's status poll before the slot counts as dead (polls every second)
STOP_SILENCE = 3.0  # seconds without slot 0's poll after which stop() no longer waits for mpirun's exit
SETTLE = 10.0  # seconds the other ranks have to return after one raised, before the job counts as broken
LAUNCH_ACK = 30.0  # seconds slot 0 has to acknowledge the launch spec once every slot registered (polls every 1 s)


class RankError(RuntimeError):
    """A rank raised in a `SlotJob.call`.

    Args:
        rank: the rank that raised (the lowest, when several did).
        trace: its formatted traceback.
        who: what the message starts with (e.g. "tfring.spark.run").
    """

    def __init__(self, rank, trace, who="tfring"):
        super().__init__("%s: rank %d raised:\n%s" % (who, rank, trace))
        self.rank, self.traceback = rank, trace


class LaunchError(RuntimeError):
    """Slot 0 could not start mpirun (bad launch arguments such as extra_mpi_args, no mpirun).

    Args:
        error: why, as slot 0 reported it.
        where: the slot, e.g. "slot 0 (host h)".
    """

    def __init__(self, error, where="slot 0"):
        super().__init__("tfring: %s could not start mpirun: %s" % (where, error))
        self.error = error


class SlotJob(SlotService):
    """The driver service of a slot job: registers the slots, hands slot 0 the mpirun to run, serves calls to the
    ranks and collects their results.

    Args:
        num_slots: the number of slots (= ranks).
        bind_host: the address the service listens on: this machine's address on the route to the slots
            (127.0.0.1 when they all run here); never a wildcard.
        secret: the job's secret (default: a new one); the slots need it (pass it in their closure or environment,
            never on a command line).
        env: the ranks' environment (default: this process's), forwarded by mpirun.
        launch_args: more tfringrun arguments for the job, e.g. ["--mpi-args", "...", "--network-interface", "eth0"].
        executable: the ranks' Python (default: the launcher slot's sys.executable).
        stdout: where the ranks' stdout goes (default sys.stdout).
        stderr: where the ranks' stderr and mpirun's messages go (default sys.stderr).
        log: where refused requests are logged (default sys.stderr).

    Raises:
        ValueError: a bad number of slots, a wildcard bind address or a bad secret.
        OSError: the address cannot be bound.
    """

    # -- the driver's API (the service's handlers: service.py) --

    def _check(self):
        # Under the lock: the job's own state only (the scheduler's `alive` runs outside it: it may block).
        if self._launch_error is not None:
            raise LaunchError(self._launch_error, self._where_slot(0))
        if self._failed:
            raise RuntimeError("tfring: %s" % self._failed)
        now = time.monotonic()
        for index, slot in sorted(self._slots.items()):
            if now - slot["seen"] > SLOT_SILENCE:
                self._failed = "slot %d (host %s) has not been heard from for %d s: its process or host died" % (
                    index, slot["host"], SLOT_SILENCE)
                raise RuntimeError("tfring: %s" % self._failed)
        if self._ready_at is not None and not self._launch_acked and not self._stopping and \
                now - self._ready_at > LAUNCH_ACK:
            self._failed = "%s did not acknowledge the launch within %g s (LAUNCH_ACK): its status replies " \
                "are lost" % (self._where_slot(0), LAUNCH_ACK)
            raise TimeoutError("tfring: %s" % self._failed)

    def _where_slot(self, index):
        slot = self._slots.get(index)
        return "slot %d (host %s)" % (index, slot["host"]) if slot else "slot %d" % index

    def wait_ready(self, timeout, alive=None):
        """Waits until every slot registered, then until slot 0 has taken the job (mpirun started).

        Args:
            timeout: seconds for every slot to register; what is left of it is also the ranks' start deadline.
                Slot 0 then has LAUNCH_ACK seconds to acknowledge the launch.
            alive: callable raising an exception when the scheduler can no longer start the slots (e.g. its job
                failed), checked about every second (never under the job's lock), or None.

        Raises:
            ValueError: timeout is not a positive, finite number.
            TimeoutError: not every slot registered in time (the message says how many did), or slot 0 did not
                acknowledge the launch within LAUNCH_ACK seconds.
            LaunchError: slot 0 could not start mpirun (bad arguments, no mpirun).
            RuntimeError: a slot died or was restarted.
        """
        check_seconds("timeout", timeout)
        deadline = time.monotonic() + timeout
        with self._cond:
            self._start_deadline = deadline  # what is left of it when slot 0 takes the job: the ranks' start deadline

        def expired():
            return TimeoutError(
                "tfring: only %d of %d slots started within %g s (registered: %s); the cluster may not be able to "
                "run %d tasks at once, or a larger start timeout is needed" % (
                    len(self._slots), self.num_slots, timeout, sorted(self._slots) or "none", self.num_slots))
        self._wait(lambda: len(self._slots) == self.num_slots, deadline, alive, expired)
        # The launch ack's own deadline (LAUNCH_ACK) is enforced by _check.
        self._wait(lambda: self._launch_acked or self._stopping, float("inf"), alive, None)
        if not self._launch_acked:
            raise RuntimeError("tfring: the job was stopped before slot 0 took it")

    def slot_of(self, rank):
        """The slot a rank belongs to (on a host, the ranks take that host's slots in local rank order).

        Args:
            rank: the world rank.

        Returns:
            int: the slot's index, known once the rank asked for its first call (so after any `call` returned); None
            before, or when the rank could not find its slot.
        """
        with self._cond:
            return self._rank_slot.get(rank)

    def _where(self, rank):
        slot = self._rank_slot.get(rank)
        if slot is None or slot not in self._slots:
            return "rank %d" % rank
        return "rank %d (slot %d, host %s)" % (rank, slot, self._slots[slot]["host"])

    def _exit_error(self, got):
        missing = sorted(set(range(self.num_slots)) - set(got))
        summary = self._exit[1]
        for name, slot in self._names.items():  # PRRTE names the made-up hosts
            summary = summary.replace(name, "%s [%s]" % (name, slot))
        now = time.monotonic()
        silent = ["slot %d (host %s) died (%s)" % (i, slot["host"], "rank %d saw it" % self._gone[i] if i in self._gone
                                                   else "silent for %.0f s" % (now - slot["seen"]))
                  for i, slot in sorted(self._slots.items()) if i in self._gone or now - slot["seen"] > STOP_SILENCE]
        return RuntimeError("tfring: mpirun exited with code %d before %s returned%s%s" % (
            self._exit[0], ", ".join(self._where(r) for r in missing), ": " + summary if summary else "",
            "".join("; " + s for s in silent)))

    def call(self, fn, args=(), kwargs=None, alive=None, timeout=None):
        """Runs fn(*args, **kwargs) on every rank.

        A call in which a rank raised fails at once. The other ranks then have SETTLE seconds to return: if some do
        not (they may be blocked in a collective the raising rank never joined), the job is broken and every later
        call fails (at once after that deadline; a call made before it first waits for it). Without a timeout the
        call may take as long as fn does, but no lost message leaves it waiting: a lost launch spec or exit report
        is repeated until acknowledged, and a dead slot is silent for at most SLOT_SILENCE seconds.

        Args:
            fn: the function (cloudpickled: closures and lambdas travel by value).
            args: positional arguments.
            kwargs: keyword arguments.
            alive: as for `wait_ready`.
            timeout: seconds the call may take, or None (no limit on fn's own running time).

        Returns:
            list: each rank's return value, in rank order.

        Raises:
            ValueError: a bad timeout.
            RankError: a rank raised (the lowest such rank, with its traceback).
            TimeoutError: the ranks did not all return within `timeout` (the job is broken after that).
            LaunchError: slot 0 could not start mpirun.
            RuntimeError: the job is broken, mpirun ended before every rank answered, a slot died, or not every
                slot registered yet (call `wait_ready` first).
        """
        check_seconds("timeout", timeout, none=True)
        payload = encode((fn, tuple(args), dict(kwargs or {})))
        with self._cond:
            self._check()  # a slot already lost: fail at once
            if len(self._slots) < self.num_slots:
                raise RuntimeError("tfring: call() before every slot registered: call wait_ready() first")
            self._settle()
            if self._broken:
                raise RuntimeError("tfring: the job cannot run more calls: %s" % self._broken)
            seq = self._post_call(payload)
        # From the posting on: a previous call's settling (up to SETTLE) must not use up this call's time.
        deadline = time.monotonic() + timeout if timeout is not None else float("inf")
        state = {}

        def answered():  # under the lock
            got = self._results.get(seq, {})
            failed = sorted(r for r, (ok, _) in got.items() if not ok)
            if len(got) == self.num_slots or failed:
                state["failed"] = failed
                return True
            if self._exit is not None and self._launch_error is None:
                self._broken = "mpirun exited"
                raise self._exit_error(got)
            return False

        def expired():  # under the lock
            missing = sorted(set(range(self.num_slots)) - set(self._results.get(seq, {})))
            self._broken = "call %d timed out" % seq
            return TimeoutError("tfring: %s did not return within %g s (timeout); stop this job and start a new "
                                "one" % (", ".join(self._where(r) for r in missing), timeout))
        self._wait(answered, deadline, alive, expired)
        with self._cond:
            failed = state["failed"]
            if failed:
                self._settling = (seq, time.monotonic() + SETTLE, failed[0])
                values = self._results[seq]
            else:
                values = self._results.pop(seq)
                del self._calls[seq]
        if failed:
            raise RankError(failed[0], values[failed[0]][1])
        return [decode(values[rank][1]) for rank in range(self.num_slots)]

    def _settle(self):
        # After a call in which a rank raised: every other rank must return by the deadline, or the job is broken.
        if self._settling is None:
            return
        seq, deadline, rank = self._settling
        while len(self._results.get(seq, {})) < self.num_slots and self._exit is None:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(self.num_slots)) - set(self._results.get(seq, {})))
                self._broken = "in call %d rank %d raised and %s did not return within %g s (blocked in a " \
                    "collective?); stop this job and start a new one" % (
                        seq, rank, ", ".join(self._where(r) for r in missing), SETTLE)
                break
            self._cond.wait(min(left, 1.0))
        if self._exit is not None and not self._broken:
            self._broken = "mpirun exited"
        self._settling = None
        self._results.pop(seq, None)
        self._calls.pop(seq, None)

    def stop(self, timeout=15.0):
        """Tells the ranks and slots to stop and waits (at most `timeout` s) until mpirun has exited.

        Does not wait when slot 0 (which runs mpirun) stopped polling: its process is gone, no exit report can come.
        Never raises for a job that failed: it is what cleans up after one.

        Args:
            timeout: seconds to wait.

        Returns:
            bool: whether mpirun's exit was reported (True as well when it never started).

        Raises:
            ValueError: timeout is not a positive, finite number.
        """
        check_seconds("timeout", timeout)
        deadline = time.monotonic() + timeout
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            while self._launched and self._exit is None and time.monotonic() < deadline:
                if time.monotonic() - self._slots[0]["seen"] > STOP_SILENCE:
                    break
                if self._failed and self._launch_acked:  # mpirun runs; a failed job does not wait for its end
                    break
                self._cond.wait(min(0.5, max(deadline - time.monotonic(), 0.01)))
            return not self._launched or self._exit is not None

    def close(self):
        """Stops the service (call after `stop`, once the slots had time to hear it)."""
        self._server.stop()
