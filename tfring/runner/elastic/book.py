"""The elastic driver's books (HostBook): discovered, blacklisted and available hosts, where the job's ranks are,
resets; and the handlers the ranks call (`/hosts`, `/reset`, `/log`)."""
import collections
import random
import sys
import threading
import time

from tfring.common.elastic import protocol
from tfring.runner.elastic.hostnames import canonical_host


def _placement(hosts, np_):  # {host: ranks} as mpirun places np_ ranks (--map-by slot: each host's slots in turn)
    placed, left = {}, np_
    for name, slots in hosts:
        n = min(slots, left)
        if n > 0:
            placed[name] = placed.get(name, 0) + n
            left -= n
    return placed


def choose_hosts(available, np_, max_np=None):
    """(the first available hosts whose slots hold the ranks, min(np_, available slots, max_np) ranks)"""
    total = sum(s for _, s in available)
    n = min(np_, total, max_np or total)
    chosen, room = [], n
    for name, slots in available:
        if room <= 0:
            break
        chosen.append((name, slots))
        room -= slots
    return chosen, n


class HostBook:
    """The driver's books: discovered, blacklisted and available hosts, the job's ranks per host, resets; and the
    handlers the ranks call. Thread-safe.

    After a failure, a host whose ranks were all lost while discovery still lists it, or that lost ranks in two
    failure resets in a row, is blacklisted. One dead process on a host whose other ranks live on does not blacklist
    the host: only the dead rank's slot is held out (not offered for growth), as Horovod holds out a failed host.
    Both last for a random time in --blacklist-cooldown-range, else for the rest of the job.

    Args:
        max_np: --max-np (None or 0: no limit).
        cooldown_range: (min, max) seconds a blacklisted host stays out, None for good.
        reset_limit: --reset-limit (None: no limit); only logged here, the ranks enforce it.
        say: callable(str) writing one `tfringrun: elastic: ...` line (default: to sys.stderr).
    """

    def __init__(self, max_np=None, cooldown_range=None, reset_limit=None, say=None):
        self.max_np, self.cooldown_range, self.reset_limit = max_np or None, cooldown_range, reset_limit
        self._say = say or (lambda m: sys.stderr.write("tfringrun: elastic: %s\n" % m))
        self._lock = threading.RLock()
        self.discovered = []  # [(host, slots)] in discovery order
        self.blacklist = {}  # host -> time.monotonic() it comes back (inf: never)
        self.available = []  # discovered - blacklisted, hosts with slots > 0
        self.generation = 0  # bumped whenever `available` changes
        self.occupancy = {}  # host -> ranks of the job there now
        self.failures = collections.Counter()  # host -> failure resets in which it lost ranks
        self.resets = 0
        self._last_dropped = set()  # hosts that lost ranks in the last failure reset
        self.held = {}  # host -> [time.monotonic() each failed slot is offered again (inf: never)]

    def set_discovered(self, hosts):
        """Records a discovery result.

        Args:
            hosts: [(host, slots), ...].
        """
        with self._lock:
            self.discovered = [(h, int(s)) for h, s in hosts]
            self.refresh()

    def refresh(self):
        """Ends expired blacklistings and recomputes the available hosts (bumping the generation if they changed).

        Returns:
            list: the available [(host, slots), ...].
        """
        with self._lock:
            now = time.monotonic()
            for host, until in list(self.blacklist.items()):
                if until <= now:
                    del self.blacklist[host]
                    self._last_dropped.discard(host)
                    self.held.pop(host, None)
                    self._say("host %s is off the blacklist (its cooldown is over)" % host)
            listed = dict(self.discovered)
            self.held = {h: [t for t in ts if t > now] for h, ts in self.held.items() if h in listed}
            available = [(h, s) for h, s in self.discovered if s > 0 and h not in self.blacklist]
            if available != self.available:
                self.available = available
                self.generation += 1
            return list(self.available)

    def set_placement(self, hosts, np_):
        """Records the initial launch: np_ ranks filling hosts' slots in order (mpirun's --map-by slot).

        Args:
            hosts: [(host, slots), ...] given to mpirun.
            np_: ranks started.
        """
        with self._lock:
            self.occupancy = _placement(hosts, np_)

    def _canonical(self, name):
        with self._lock:
            known = [h for h, _ in self.discovered] + [h for h in self.occupancy if h not in dict(self.discovered)]
        return canonical_host(name, known)

    def _until(self):
        return time.monotonic() + random.uniform(*self.cooldown_range) if self.cooldown_range else float("inf")

    def _blacklist(self, host, why):
        if host not in self.blacklist:
            self.blacklist[host] = until = self._until()
            self._say("blacklisted host %s (%s) %s" % (host, why, "for the rest of the job" if until == float("inf")
                      else "for %.0f s (--blacklist-cooldown-range)" % (until - time.monotonic())))

    def lost(self, host):
        """PRRTE lost `host` (link cut or host down) and ended the job: blacklist it; counts as a reset.

        Args:
            host: the host name from mpirun's report; None when mpirun died on its own (nothing blacklisted).

        Returns:
            int: the number of resets so far.
        """
        with self._lock:
            if host is not None:
                self._blacklist(self._canonical(host), "Open MPI lost contact with it")
            self.resets += 1
            self.refresh()
            return self.resets

    def hosts(self, payload):
        """Handler of `/hosts`: the available hosts and the slots the job may add.

        Args:
            payload: {"rank": r} (protocol.check_hosts).

        Returns:
            dict: {"generation", "hosts": [[host, slots]], "add": [[host, n]], "size", "blacklisted"}; "add": each
            available host's slots minus the job's ranks there and its held-out slots, capped so that size + added
            <= --max-np.

        Raises:
            BadRequest: "rank" is not an integer.
        """
        protocol.check_hosts(payload)
        with self._lock:
            available = self.refresh()
            size = sum(self.occupancy.values())
            room = self.max_np - size if self.max_np else float("inf")
            add = []
            for host, slots in available:
                n = int(min(slots - self.occupancy.get(host, 0) - len(self.held.get(host, ())), room))
                if n > 0:
                    add.append([host, n])
                    room -= n
            return {"generation": self.generation, "hosts": [[h, s] for h, s in available], "add": add,
                    "size": size, "blacklisted": sorted(self.blacklist)}

    def reset(self, payload):
        """Handler of `/reset`: the job's new placement after a failure or a growth.

        Args:
            payload: {"hosts": [host of each rank, in rank order], "reason": "failure" | "grow"} (protocol.check_reset;
                "slots" is for the Spark/Ray book).

        Returns:
            dict: {"ok": True, "resets": count so far, "generation": g}.

        Raises:
            BadRequest: a missing or mistyped field.
        """
        hosts, _, reason = protocol.check_reset(payload)
        with self._lock:
            self.resets += 1
            new = collections.Counter(self._canonical(h) for h in hosts)
            old = self.occupancy
            if reason == "failure":
                listed = {h for h, _ in self.discovered}
                dropped = [h for h in old if new.get(h, 0) < old[h]]
                self._say("reset %d (failure): %s lost ranks; %d ranks remain" % (self.resets, ", ".join(
                    "%s %d -> %d" % (h, old[h], new.get(h, 0)) for h in dropped) or "no host", len(hosts)))
                for h in dropped:
                    self.failures[h] += 1
                    if new.get(h, 0) == 0 and h in listed:
                        self._blacklist(h, "all %d of its ranks were lost while discovery still lists it" % old[h])
                    elif h in self._last_dropped:
                        self._blacklist(h, "it lost ranks in 2 failure resets in a row")
                    else:
                        self.held.setdefault(h, []).extend(self._until() for _ in range(old[h] - new.get(h, 0)))
                self._last_dropped = set(dropped)
            self.occupancy = dict(new)
            if self.reset_limit is not None and self.resets > self.reset_limit:
                self._say("reset %d is over --reset-limit %d: the ranks end the job" % (self.resets, self.reset_limit))
            self.refresh()
            return {"ok": True, "resets": self.resets, "generation": self.generation}

    def log(self, payload):
        """Handler of `/log`: a rank's message, as one line on tfringrun's stderr.

        Args:
            payload: {"message": str}.

        Returns:
            dict: {"ok": True}.

        Raises:
            BadRequest: no string message.
        """
        self._say(protocol.check_log(payload))
        return {"ok": True}

    def handlers(self):
        """The server's handler table.

        Returns:
            dict: {path: handler}.
        """
        return {protocol.HOSTS: self.hosts, protocol.RESET: self.reset, protocol.LOG: self.log}
