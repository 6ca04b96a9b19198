"""The books of an elastic slot job (elastic_job.ElasticSlotJob): which slots the scheduler has registered, which of
them hold a rank, how hosts are named to mpirun, and the elastic ranks' channel (`/hosts`, `/reset`, `/log`,
`/exit`, as tfringrun's elastic driver serves them, so tfring.common.elastic runs unchanged on both).

A slot is a scheduler's process (a Spark task, a Ray actor) identified by its index; a slot registered again under
the same index with another address is a new process (the scheduler restarted it): the old one is dead. The ranks
spawned for growth are assigned their slots here (`/hosts` "assign"), so every rank knows which process it dies
with."""
import time

from tfring.common.signed_channel import BadRequest
from tfring.runner.slots.service import HOST_NAME, LOCAL_HOST

OFFER_SILENCE = 5.0  # a slot not heard from for this long (it polls every second) is not offered for growth


def _int(payload, key):
    value = payload.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest("%s: expected a non-negative integer, got %r" % (key, value))
    return value


class SlotBook:
    """Slots, members and host names of one elastic slot job; every method takes the caller's lock.

    Args:
        cond: the job's threading.Condition (notified when membership changes).
        local_host: the host identity of the process that runs mpirun (its slots' ranks are mpirun's own children).
        max_np: the most ranks (None: no limit).
        say: writes one line to the job's stderr.
    """

    def __init__(self, cond, local_host, max_np, say):
        self.cond, self.local_host, self.max_np, self.say = cond, local_host, max_np, say
        self.slots = {}  # index -> {"host", "address", "seen", "pid", "started", "network", "dead"}
        self.members = set()  # slot indexes holding a rank of the job
        self.names = {}  # host identity -> the name mpirun knows it by
        self.resets, self.reasons = 0, []
        self.exits = {}  # rank -> exit code, as the elastic ranks report it at exit

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

    def gone(self, index):
        slot = self.slots.get(index)
        if slot is not None and not slot["dead"]:
            slot["dead"] = True
            self.say("slot %d (host %s) died: its rank leaves the job" % (index, slot["host"]))
        self.members.discard(index)

    def live(self, fresh=None):
        now = time.monotonic()
        return sorted(i for i, s in self.slots.items()
                      if not s["dead"] and (fresh is None or now - s["seen"] <= fresh))

    def name(self, host):
        """The mpirun host name of a host identity (the launcher's host is localhost, others made-up names)."""
        if host not in self.names:
            self.names[host] = LOCAL_HOST if host == self.local_host else HOST_NAME % (len(self.names) + 1)
        return self.names[host]

    def address_of(self, name):
        """The task service of a made-up host's first live slot (the agent starts PRRTE's daemon there)."""
        for host, known in self.names.items():
            if known == name:
                for index in self.live():
                    if self.slots[index]["host"] == host:
                        return self.slots[index]["address"]
        return None

    def placement(self, indexes):
        """[[name, n, address]] and the slots in rank order for a launch on `indexes` (hosts in first-seen order,
        the launcher's host first: mpirun fills the hosts in -H order)."""
        by_host = {}
        for index in indexes:
            by_host.setdefault(self.slots[index]["host"], []).append(index)
        order = sorted(by_host, key=lambda h: (h != self.local_host, min(by_host[h])))
        hosts = [[self.name(h), len(by_host[h]), self.slots[by_host[h][0]]["address"]] for h in order]
        ranks = [i for h in order for i in by_host[h]]
        return hosts, ranks

    def entry(self, index):
        slot = self.slots[index]
        return [index, slot["pid"], slot["started"]]

    # -- the elastic ranks' channel --

    def hosts(self, payload):
        """`/hosts`: the live slots without a rank, as growth mpirun can spawn ("add"), and which slot each process
        spawned there belongs to ("assign", in spawn order)."""
        _int(payload, "rank")
        with self.cond:
            free = [i for i in self.live(OFFER_SILENCE) if i not in self.members]
            room = len(free) if self.max_np is None else max(0, self.max_np - len(self.members))
            grouped = {}  # mpirun places the spawned processes host by host in this order: so does "assign"
            for index in free[:room]:
                grouped.setdefault(self.name(self.slots[index]["host"]), []).append(self.entry(index))
            add = [[name, len(entries)] for name, entries in grouped.items()]
            assign = [entry for entries in grouped.values() for entry in entries]
            return {"add": add, "assign": assign, "size": len(self.members),
                    "hosts": [[self.name(self.slots[i]["host"]), 1] for i in self.live()]}

    def reset(self, payload):
        """`/reset`: rank 0's report of the job's slots after a shrink or before a spawn."""
        slots = payload.get("slots")
        if not isinstance(slots, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in slots):
            raise BadRequest("slots: expected a list of slot indexes")
        reason = payload.get("reason")
        with self.cond:
            self.members = {s for s in slots if s in self.slots and not self.slots[s]["dead"]}
            self.resets += 1
            self.reasons.append((time.time(), str(reason), len(slots)))
            self.cond.notify_all()
        return {}

    def log(self, payload):
        message = payload.get("message")
        if not isinstance(message, str):
            raise BadRequest("message: expected a string")
        self.say(message[:4000])
        return {}

    def exit(self, payload):
        rank, code = _int(payload, "rank"), payload.get("code")
        with self.cond:
            self.exits[rank] = code if isinstance(code, int) else 1
        return {"ack": True}

    def handlers(self):
        return {"/hosts": self.hosts, "/reset": self.reset, "/log": self.log, "/exit": self.exit}
