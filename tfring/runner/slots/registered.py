"""The Spark/Ray slot source of the elastic book (tfring.runner.elastic.book.ElasticBook, which the elastic slot job
elastic_job.ElasticSlotJob serves): which slots the scheduler has registered, which of them hold a rank, and how
hosts are named to mpirun.

A slot is a scheduler's process (a Spark task, a Ray actor) identified by its index; a slot registered again under
the same index with another address is a new process (the scheduler restarted it): the old one is dead. The ranks
spawned for growth are assigned their slots here (`/hosts` "assign"), so every rank knows which process it dies
with."""
import os
import re
import socket
import time

from tfring.runner.processes import start_time
from tfring.runner.slots.service import HOST_NAME, LOCAL_HOST

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}\Z")
OFFER_SILENCE = 5.0  # a slot not heard from for this long (it polls every second) is not offered for growth


class RegisteredSlots:
    """Slots, members and host names of one elastic slot job; every method takes the caller's lock (`lock`, the
    job's Condition, which the book holds around each call).

    Args:
        cond: the job's threading.Condition (notified when membership changes).
        local_host: the host identity of the process that runs mpirun (its slots' ranks are mpirun's own children).
        say: writes one line to the job's stderr.
    """

    def __init__(self, cond, local_host, say):
        self.cond = self.lock = cond
        self.local_host, self.say = local_host, say
        self.slots = {}  # index -> {"host", "address", "seen", "pid", "started", "network", "dead"}
        self.members = set()  # slot indexes holding a rank of the job
        self.order = []  # the slots of the ranks in rank order, as last launched or reported
        self.names = {}  # host identity -> the name mpirun knows it by
        self.daemons = {}  # mpirun host name -> the slot index that runs its PRRTE daemon
        self.launched = set()  # mpirun host names the job runs on
        self.unreachable = set()  # host names of slots not offered (said once)
        self.ending = {}  # mpirun host name -> orders out to end a silent rank there (slot_ender): not offered
        self.local_anchor = [os.getpid(), start_time(os.getpid())]  # mpirun runs in this process
        self.regrow = None  # callable(slot indexes on hosts the job does not run on) -> whether the job starts again

    # -- slots --

    def register(self, index, slot):
        """A slot registered; returns the index of a slot it replaced (dead), else None."""
        old = self.slots.get(index)
        if old is not None and old["address"] == slot["address"]:
            old["seen"] = slot["seen"]
            return None
        self.slots[index] = slot
        if old is not None:
            self.say("slot %d (host %s) was restarted by the scheduler: its old process is gone" % (index, old["host"]))
            self.members.discard(index)
            return index
        return None

    def gone(self, index, pid=None, started=None):
        """Slot `index`'s process died (a rank's watchdog saw it). With the dead process's pid and start time, a
        report about an older process of a slot the scheduler already restarted changes nothing. Returns whether
        the report was taken."""
        slot = self.slots.get(index)
        if slot is not None and pid is not None and (slot["pid"], slot["started"]) != (pid, started):
            return False  # the slot registered again since (a new process): its rank left with the old one
        if slot is not None and slot["dead"] is not True:
            slot["dead"] = True
            self.say("slot %d (host %s) died: its rank leaves the job" % (index, slot["host"]))
        self.members.discard(index)
        return True

    def live(self, fresh=None):
        now = time.monotonic()
        return sorted(i for i, s in self.slots.items()
                      if not s["dead"] and (fresh is None or now - s["seen"] <= fresh))

    def usable(self):
        """The live slots a launch or a growth may use: not on a host with an order out to end a silent rank."""
        live = self.live()
        if not self.ending:  # name() makes up a host's name on first use: not here, in slot order
            return live
        return [i for i in live if self.name(self.slots[i]["host"]) not in self.ending]

    def name(self, host):
        """The mpirun host name of a host identity: localhost for the launcher's host; else the machine's own name
        when it is a plain host name no other host uses (Open MPI knows a daemon by the name it reports, and
        mixes up an added host named otherwise), else a made-up name."""
        if host not in self.names:
            if host == self.local_host:
                self.names[host] = LOCAL_HOST
            else:
                named = {s.get("hostname") for s in self.slots.values() if s["host"] == host}
                others = {s.get("hostname") for s in self.slots.values() if s["host"] != host}
                plain = named.pop() if len(named) == 1 else None
                ok = plain and _PLAIN.match(plain) and plain not in others and plain not in self.names.values() \
                    and plain not in (LOCAL_HOST, socket.gethostname())
                self.names[host] = plain if ok else HOST_NAME % (len(self.names) + 1)
        return self.names[host]

    def address_of(self, name):
        """The task service of the slot that runs (or is to run) a made-up host's PRRTE daemon: the one chosen at
        the launch, else the host's first live slot (a host added later, asked for by the agent)."""
        index = self.daemons.get(name)
        if index is None or self.slots[index]["dead"] is True:
            host = next((h for h, known in self.names.items() if known == name), None)
            index = next((i for i in self.live() if self.slots[i]["host"] == host), None)
            if index is None:
                return None
            self.daemons[name] = index
        return self.slots[index]["address"]

    def anchor(self, name):
        """[pid, start time] of the process every rank on host `name` descends from: mpirun's (the driver) on
        localhost, the daemon's slot elsewhere; None when no daemon slot is known yet."""
        if name == LOCAL_HOST:
            return self.local_anchor
        self.address_of(name)
        index = self.daemons.get(name)
        return None if index is None else [self.slots[index]["pid"], self.slots[index]["started"]]

    def placement(self, indexes, first=None):
        """[[name, n, address]] and the slots in rank order for a launch on `indexes` (hosts in first-seen order,
        host `first` (a relaunch: one that holds the newest commit, which rank 0 reads) then the launcher's host
        first: mpirun fills the hosts in -H order)."""
        by_host = {}
        for index in indexes:
            by_host.setdefault(self.slots[index]["host"], []).append(index)
        order = sorted(by_host, key=lambda h: (h != first, h != self.local_host, min(by_host[h])))
        hosts = [[self.name(h), len(by_host[h]), self.slots[by_host[h][0]]["address"]] for h in order]
        for h in order:
            if self.name(h) != LOCAL_HOST:
                self.daemons[self.name(h)] = by_host[h][0]  # the agent asks this slot (SLOT_HOSTS)
            self.launched.add(self.name(h))
        ranks = [i for h in order for i in by_host[h]]
        return hosts, ranks

    def assignment(self, ranks):
        """{mpirun host name: {"anchor": [pid, start], "slots": [[index, pid, start], ...] in local rank order}}:
        a rank finds its host by the anchor among its ancestors (Open MPI names every host by the machine's name,
        so host names cannot tell made-up hosts on one machine apart) and its slot by its local rank."""
        out = {}
        for index in ranks:
            name = self.name(self.slots[index]["host"])
            out.setdefault(name, {"anchor": self.anchor(name), "slots": []})["slots"].append(self.entry(index))
        return out

    def entry(self, index):
        slot = self.slots[index]
        return [index, slot["pid"], slot["started"]]

    # -- the book's source interface (tfring.runner.elastic.book.ElasticBook) --

    def size(self):
        return len(self.members)

    def describe(self):
        return {}

    def lost(self, host):
        """mpirun lost `host` (its name there) and ended the job, or died itself (None): the host's slots are held
        out of the relaunch as silent until they are heard from again."""
        for slot in self.slots.values():
            if host is not None and not slot["dead"] and self.name(slot["host"]) == host:
                slot["dead"] = "silent"

    def offer(self, room):
        """The live slots without a rank, at most `room`, as growth mpirun can spawn ([[host, n]]), and which slot
        each process spawned there belongs to ({host: {"anchor", "slots" in local rank order, "new"}})."""
        usable = set(self.usable())
        free = [i for i in self.live(OFFER_SILENCE) if i not in self.members and i in usable]
        fresh = [i for i in free if not self._known(i)]
        if fresh and room >= 1:
            if self.regrow is not None and self.regrow(fresh):
                return [], {}  # the job starts again on every live slot, these included
            for index in fresh:
                self._not_used(index)
        free = [i for i in free if i not in fresh]
        assign = self.assignment(free if room == float("inf") else free[:max(0, int(room))])
        for name in assign:  # PMIX_ADD_HOST only for a host the job does not run on yet
            assign[name]["new"] = name not in self.launched
        return [[name, len(a["slots"])] for name, a in assign.items()], assign

    def _known(self, index):
        """Whether a slot's host already runs the job (or is mpirun's own): Open MPI 5.0.11 fails a spawn onto a
        host added through the slot agent (PMIX_ERROR in pmix_server_dyn.c, then a lost daemon, on emulated
        hosts), so a slot on a new host is never offered for a spawn: the job starts again on it (`regrow`)."""
        name = self.name(self.slots[index]["host"])
        # A host where the job has no rank left counts as new: its daemon forgot the job, and a spawn there fails in
        # the new process's MPI_Init ("Not supported" in dpm.c: PRRTE's connect does not know the parent's job).
        return name == LOCAL_HOST or any(self.name(self.slots[m]["host"]) == name for m in self.members)

    def _not_used(self, index):  # a slot on a new host while the job cannot start again (said once per host)
        name = self.name(self.slots[index]["host"])
        if name not in self.unreachable:
            self.unreachable.add(name)
            self.say("slot %d is on a host the job does not run on (%s): not used (Open MPI cannot add a host to a "
                     "running slot job, and this one cannot start again)" % (index, self.slots[index]["host"]))

    def record(self, reason, hosts, slots, resets):
        """Rank 0's report of the job's slots after a shrink or before a spawn."""
        self.members = {s for s in slots if s in self.slots and self.slots[s]["dead"] is not True}
        self.order = list(slots)
        self.launched |= {self.name(self.slots[s]["host"]) for s in self.members}
        self.cond.notify_all()
