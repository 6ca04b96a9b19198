"""tfringrun's slot source for the elastic book (book.ElasticBook): discovered, blacklisted and available hosts, the
job's ranks per host, and the slots held out after a failure."""
import collections
import random
import sys
import threading
import time

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


class DiscoveredHosts:
    """The hosts a discovery script (or -H) lists, as slots for the elastic book: discovered, blacklisted and
    available hosts, the job's ranks per host. Thread-safe (`lock`, which the book holds around each call).

    After a failure, a host whose ranks were all lost while discovery still lists it, or that lost ranks in two
    failure resets in a row, is blacklisted. One dead process on a host whose other ranks live on does not blacklist
    the host: only the dead rank's slot is held out (not offered for growth), as Horovod holds out a failed host.
    Both last for a random time in --blacklist-cooldown-range, else for the rest of the job.

    Args:
        cooldown_range: (min, max) seconds a blacklisted host stays out, None for good.
        say: callable(str) writing one `tfringrun: elastic: ...` line (default: to sys.stderr).
    """

    def __init__(self, cooldown_range=None, say=None):
        self.cooldown_range = cooldown_range
        self._say = say or (lambda m: sys.stderr.write("tfringrun: elastic: %s\n" % m))
        self.lock = self._lock = threading.RLock()
        self.discovered = []  # [(host, slots)] in discovery order
        self.blacklist = {}  # host -> time.monotonic() it comes back (inf: never)
        self.available = []  # discovered - blacklisted, hosts with slots > 0
        self.generation = 0  # bumped whenever `available` changes
        self.occupancy = {}  # host -> ranks of the job there now
        self.failures = collections.Counter()  # host -> failure resets in which it lost ranks
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
        """PRRTE lost `host` (link cut or host down) and ended the job: blacklists it.

        Args:
            host: the host name from mpirun's report; None when mpirun died on its own (nothing blacklisted).
        """
        with self._lock:
            if host is not None:
                self._blacklist(self._canonical(host), "Open MPI lost contact with it")
            self.refresh()

    # -- the book's source interface (book.ElasticBook) --

    def size(self):
        with self._lock:
            return sum(self.occupancy.values())

    def offer(self, room):
        """([[host, n]], {}): each available host's slots minus the job's ranks there and its held-out slots, in
        discovery order, at most `room` in all."""
        with self._lock:
            add = []
            for host, slots in self.refresh():
                n = int(min(slots - self.occupancy.get(host, 0) - len(self.held.get(host, ())), room))
                if n > 0:
                    add.append([host, n])
                    room -= n
            return add, {}

    def describe(self):
        with self._lock:
            return {"generation": self.generation, "hosts": [[h, s] for h, s in self.available],
                    "blacklisted": sorted(self.blacklist)}

    def record(self, reason, hosts, slots, resets):
        """The job's ranks after reset number `resets` (each rank's host, in rank order). After a failure a host
        whose ranks were all lost while discovery still lists it, or that lost ranks in two failure resets in a
        row, is blacklisted; otherwise only its lost slots are held out."""
        with self._lock:
            new = collections.Counter(self._canonical(h) for h in hosts)
            old = self.occupancy
            if reason == "failure":
                listed = {h for h, _ in self.discovered}
                dropped = [h for h in old if new.get(h, 0) < old[h]]
                self._say("reset %d (failure): %s lost ranks; %d ranks remain" % (resets, ", ".join(
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
            self.refresh()
