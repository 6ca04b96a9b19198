"""The relaunch half of the elastic slot job (elastic_job.ElasticSlotJob): when mpirun ends the job while a call
runs (it died of a signal, lost a host, or its ranks died inside Open MPI), or must end it (a slot on a host the job
does not run on, which Open MPI 5.0.11 cannot add to a running job; a host that stopped responding), mpirun starts
again on the live slots and the ranks resume from the last commit on disk (TFRING_ELASTIC_RESTART)."""
import time

from tfring.common.signed_channel import DriverClient
from tfring.runner.slots.launcher import Launcher
from tfring.runner.slots.wire import SERVICE


class Relaunching:
    """Mixed into ElasticSlotJob, whose state it uses: _cond, slots, book, _relaunch, _launches,
    _requests_at_launch, _idle_relaunch, _calls, _results, _asked, _ranks, _exit, _stopping, _closed, _timeout,
    _reset_limit, min_np, max_np, _spec(), _say()."""

    def _relaunchable(self, open_mpis_fault):  # under the lock: mpirun ended with a call in flight, none failed
        in_flight = bool(self._calls) and all(ok for got in self._results.values() for ok, _ in got.values())
        if not in_flight or self._stopping or self._closed.is_set():
            return False
        progress = self.book.host_requests > self._requests_at_launch
        if not progress and (not open_mpis_fault or self._idle_relaunch):
            return False
        self._idle_relaunch = not progress
        return True

    def _regrow(self, fresh):  # under the lock: rank 0's /hosts at a commit (on disk now), free slots on new hosts
        return self._start_again("slot%s %s on host%s %s, which the job does not run on" % (
            "s" if len(fresh) > 1 else "", ",".join(map(str, fresh)), "s" if len(fresh) > 1 else "",
            ",".join(sorted({self.slots.slots[i]["host"] for i in fresh}))))

    def _start_again(self, why, lost=None):  # under the lock: mpirun (re)starts on the live slots, within reset_limit
        if self._relaunch is None and self._exit is None and not self._stopping:
            if self._reset_limit is not None and self.book.resets >= self._reset_limit:
                return False
            self.book.lost(lost)  # counts as a reset; a lost host's slots are held out
            self._relaunch = why
            self._cond.notify_all()
        return self._relaunch is not None

    def _run_launcher(self, spec):
        # mpirun is this thread's child (it dies with the thread: PR_SET_PDEATHSIG), so the thread lives until close.
        while spec is not None:
            client = DriverClient(self.address, self.secret, timeout=10.0, name=SERVICE)
            self.launcher = Launcher(client, spec, self.secret, done=self._every_rank_exited)
            with self._cond:
                while self._relaunch is None and not self._closed.is_set():
                    self._cond.wait(0.5)
            self.launcher.stop()
            spec = None if self._closed.is_set() else self._respec()

    def _every_rank_exited(self):  # the launcher ends an mpirun that lingers after it (a daemon cut off)
        return self.book.exits.complete_size() is not None

    def _respec(self):
        """The launch spec of a relaunch on the live slots (up to max_np), once min_np of them are live (at most
        elastic_timeout s); None (the job ends) without them."""
        deadline = time.monotonic() + self._timeout
        with self._cond:
            self._say("%s: starting the job again on the live slots from the last commit" % self._relaunch)
            while len(self.slots.usable()) < self.min_np and time.monotonic() < deadline and \
                    not self._closed.is_set():
                self._cond.wait(0.5)
            live = self.slots.usable()  # not a machine whose silent rank is being ended
            if len(live) < self.min_np or self._closed.is_set():
                self._exit = (1, "%s, and only %d live slots within %d s (min_np %d)" % (
                    self._relaunch, len(live), self._timeout, self.min_np))
                self._relaunch = None
                self._cond.notify_all()
                return None
            self._launches += 1
            self.book.declared.clear()  # new processes: a pid declared silent before may come back
            self._relaunch, self._requests_at_launch = None, self.book.host_requests
            self._results.clear()  # a call in flight starts again on the new ranks
            self._asked.clear()
            self._ranks.clear()
            # Every host that held a rank has the newest commit (each host's first rank writes it); rank 0 reads its
            # own host's: the new rank 0 goes on the host of the first live slot that held a rank (not a new host).
            kept = [i for i in self.slots.order if i in live]
            first = self.slots.slots[kept[0]]["host"] if kept else None
            chosen = (kept + [i for i in live if i not in kept])[:self.max_np or len(live)]
            self.slots.launched = set()
            spec = self._spec(sorted(chosen), self._start_timeout, restart=True, first=first)
            self._launched_at = time.monotonic()
            self._cond.notify_all()
            return spec
