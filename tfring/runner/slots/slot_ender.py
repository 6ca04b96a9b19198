"""`/end` for an elastic slot job (Spark, Ray): a rank stopped responding and no live rank shares its host, so no
rank can end it (tfring.common.elastic.ender). On the driver's machine the driver SIGKILLs it itself (mpirun runs
here: the rank is one of its descendants); on another machine the slot that runs that machine's Open MPI daemon
does, told in the reply to its next status poll (every second) and answering in the one after (task.end_ranks: only
a process below that slot). Open MPI then reports the rank's death and the survivors go on as after a kill. When
that slot does not answer within WAIT seconds (the whole machine froze, or its link is gone), its slots are held
out: the survivors, which declared the rank failed to MPI before asking (tfring.common.elastic.ender), have gone on
in place. Only a rank the survivors did not go on without (not declared, or a declaration MPI did not take: no
failure reset since) makes the job start again without the host from the last commit (the job's `relaunch`).
While an order is out, the host's slots are not offered for growth: a commit of the survivors must not take the
frozen machine back."""
import os
import signal
import time

from tfring.runner.elastic.hostnames import is_local
from tfring.runner.processes import descendants
from tfring.runner.slots.service import LOCAL_HOST

WAIT = 5.0  # seconds for the daemon's slot to carry out an order (two status polls, with room for a busy host)


class SlotEnder:
    """The book's ender (book.ElasticBook.ender) of one elastic slot job.

    Args:
        cond: the job's Condition (the slots' lock; notified when a slot reports what it ended).
        slots: the job's RegisteredSlots (which slot runs each host's daemon).
        relaunch: callable(why) under the lock: the job starts again on its live slots from the last commit.
        recovered: callable(host, pid) under the lock -> whether the survivors went on without that rank
            (book.ElasticBook.recovered).
    """

    def __init__(self, cond, slots, relaunch, recovered=lambda host, pid: False):
        self.cond, self.slots, self.relaunch, self.recovered = cond, slots, relaunch, recovered
        self.orders = {}  # slot index -> pids it is to end
        self.results = {}  # pid -> whether its slot ended it

    def orders_for(self, index):
        """Under the lock, in a slot's /status: the pids it is to end (sent once), or None."""
        return self.orders.pop(index, None)

    def heard(self, ended):
        """Under the lock: a slot's report, [[pid, whether it was ended]] (anything else is ignored)."""
        for item in ended if isinstance(ended, list) else []:
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], int) and isinstance(item[1], bool):
                self.results[item[0]] = item[1]
        self.cond.notify_all()

    def __call__(self, host, pid):
        """Ends process `pid` on `host` (the rank's Open MPI host name); returns (whether it was ended, what
        happened)."""
        if host == LOCAL_HOST or is_local(host):
            if pid not in descendants(os.getpid()):
                return False, "not ended: no process %d of this job on the driver's machine" % pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return False, "not ended: process %d had already exited" % pid
            return True, "ended (SIGKILL by the driver)"
        with self.cond:
            index = self.slots.daemons.get(host)
            if index is None:  # Open MPI may know the machine by its own host name rather than the job's
                names = {self.slots.name(s["host"]) for s in self.slots.slots.values() if s.get("hostname") == host}
                index = self.slots.daemons.get(names.pop()) if len(names) == 1 else None
            if index is None or self.slots.slots[index]["dead"] is True:
                return False, "not ended: no live slot runs the Open MPI daemon of %s" % host
            name = self.slots.name(self.slots.slots[index]["host"])  # mpirun's name of the host (offer, lost)
            self.results.pop(pid, None)
            self.orders.setdefault(index, []).append(pid)
            self.slots.ending[name] = self.slots.ending.get(name, 0) + 1
            deadline = time.monotonic() + WAIT
            try:
                while pid not in self.results and time.monotonic() < deadline:
                    self.cond.wait(deadline - time.monotonic())
            finally:
                self.slots.ending[name] -= 1
                if not self.slots.ending[name]:
                    del self.slots.ending[name]
            ended = self.results.pop(pid, None)
            if ended is None:
                self.orders.pop(index, None)
                self.slots.lost(name)
                if self.recovered(host, pid):
                    return False, "slot %d did not answer within %g s: host %s is held out (the others went on " \
                        "without it)" % (index, WAIT, host)
                self.relaunch("host %s stopped responding (slot %d did not answer within %g s)" % (host, index, WAIT))
                return False, "slot %d did not answer within %g s: the job starts again without host %s" % (
                    index, WAIT, host)
        if not ended:
            return False, "not ended: process %d is not below slot %d" % (pid, index)
        return True, "ended (SIGKILL through slot %d)" % index
