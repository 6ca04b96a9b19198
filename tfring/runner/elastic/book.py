"""The one elastic driver's books and the ranks' channel (tfring.common.elastic.protocol: `/hosts /reset /log /exit
/end /silent`) for every launcher: tfringrun (slots from discovery: discovered.DiscoveredHosts) and the Spark/Ray
elastic jobs (slots from the scheduler's registrations: tfring.runner.slots.registered.RegisteredSlots). The book
counts resets, caps growth at --max-np, records the ranks' exits, arbitrates which ranks go on when some stop
responding, and answers the ranks alike; its source says which slots are free, where the ranks are and what a
process spawned on a host must be told, so the rank side has one code path."""
import sys
import time

from tfring.common.elastic import protocol
from tfring.runner.elastic.exits import ExitLedger


class ElasticBook:
    """The ranks' channel and the job's reset count over one slot source. Thread-safe (the source's lock).

    A source has `lock` (a lock or Condition), `size()` (ranks in the job now), `offer(room)` -> (add [[host, n]],
    assign {host: {"new": bool, "slots": [...], ...}}: at most `room` new ranks), `record(reason, hosts, slots,
    resets)` (the members rank 0 reported) and `describe()` (more fields of the /hosts reply, for people and tests).

    Args:
        source: where the slots come from.
        max_np: the most ranks (None or 0: no limit).
        reset_limit: --reset-limit (None: no limit); only logged here, the ranks enforce it.
        say: callable(str) writing one line (default: `tfringrun: elastic: ...` on sys.stderr).
        forward: names of environment variables a rank passes on to the processes it spawns (a spawned process
            on another host starts from that host's daemon's environment, not mpirun's).

    `ender` (set by the launcher that can): callable(host, pid) -> (ended, message) for `/end`.
    """

    def __init__(self, source, max_np=None, reset_limit=None, say=None, forward=()):
        self.source, self.max_np, self.reset_limit = source, max_np or None, reset_limit
        # callable(host, pid) -> (ended, message): ends one of the job's processes on a host (tfringrun: ender.py);
        # None: this launcher cannot, and /end says so.
        self.ender = None
        self._say = say or (lambda m: sys.stderr.write("tfringrun: elastic: %s\n" % m))
        self.forward = sorted(forward)
        self.exits = ExitLedger()
        self.resets = 0
        self.host_requests = 0  # /hosts requests so far (one per commit of rank 0)
        self.reasons = []  # (time, "failure" | "grow", ranks) of each reset rank 0 reported
        # (host, pid) of each rank some rank declared silent (/silent) -> (who did, when): the arbiter's memory.
        # Cleared for each mpirun run (new processes; a pid may come back).
        self.declared = {}

    def hosts(self, payload):
        """Handler of `/hosts`: what the job may grow into now.

        Args:
            payload: {"rank": r} (protocol.check_hosts).

        Returns:
            dict: {"add": [[host, n]], "assign": {host: {...}}, "size", "forward": [names]} and the source's
            `describe()`; size + added <= max_np.

        Raises:
            BadRequest: "rank" is not an integer.
        """
        protocol.check_hosts(payload)
        with self.source.lock:
            self.host_requests += 1  # rank 0 asks at each commit: the launchers' measure of progress
            size = self.source.size()
            add, assign = self.source.offer(self.max_np - size if self.max_np else float("inf"))
            return dict(self.source.describe(), add=add, assign=assign, size=size, forward=self.forward)

    def reset(self, payload):
        """Handler of `/reset`: the job's members after a failure or before a growth.

        Args:
            payload: {"hosts": [host of each rank, in rank order], "slots": [slot index of each rank] (Spark/Ray),
                "reason": "failure" | "grow"} (protocol.check_reset).

        Returns:
            dict: {"ok": True, "resets": count so far}.

        Raises:
            BadRequest: a missing or mistyped field.
        """
        hosts, slots, reason = protocol.check_reset(payload)
        with self.source.lock:
            self.resets += 1
            self.reasons.append((time.time(), reason, len(hosts)))
            self.source.record(reason, hosts, slots, self.resets)
            if self.reset_limit is not None and self.resets > self.reset_limit:
                self._say("reset %d is over --reset-limit %d: the ranks end the job" % (self.resets, self.reset_limit))
            return {"ok": True, "resets": self.resets}

    def lost(self, host):
        """The launcher lost `host` and mpirun ended the job (tfringrun restarts it): the source holds the host out;
        counts as a reset.

        Args:
            host: the host name from mpirun's report; None when mpirun died on its own.

        Returns:
            int: the number of resets so far.
        """
        with self.source.lock:
            self.resets += 1
            self.source.lost(host)
            return self.resets

    def end(self, payload):
        """Handler of `/end`: a rank stopped responding and no live rank shares its host; the launcher ends it.

        Args:
            payload: {"rank", "host", "pid"} (protocol.check_end).

        Returns:
            dict: {"ok": whether it was ended, "message": what happened}.

        Raises:
            BadRequest: a missing or mistyped field.
        """
        rank, host, pid = protocol.check_end(payload)
        ended, message = self.ender(host, pid) if self.ender else (False, "this launcher cannot end processes")
        self._say("rank %d (host %s, pid %d) stopped responding and no live rank shares its host: %s" % (
            rank, host, pid, message))
        return {"ok": ended, "message": message}

    def silent(self, payload):
        """Handler of `/silent`: a rank saw others stop responding past the stall deadline (a frozen process, a cut
        link) and goes on without them, unless it was declared silent itself first. A rank cut off from the others
        reaches the launcher no better (or, on a cut link, later than the ranks on the launcher's side): it is
        refused, or cannot ask, and ends itself, so the job never splits into two that both go on.

        Args:
            payload: {"rank", "host", "pid", "silent": [{"rank", "host", "pid"}]} (protocol.check_silent).

        Returns:
            dict: {"ok": whether the asking rank goes on, "message": why not}.

        Raises:
            BadRequest: a missing or mistyped field.
        """
        me, silent = protocol.check_silent(payload)
        with self.source.lock:
            by = self.declared.get(me[1:])
            if by is not None:
                return {"ok": False, "message": "rank %d declared this rank silent first" % by[0]}
            new = [s for s in silent if s[1:] not in self.declared]
            now = time.time()
            self.declared.update((s[1:], (me[0], now)) for s in new)
        for rank, host, pid in new:
            self._say("rank %d (host %s, pid %d) stopped responding: the others go on without it (rank %d)" % (
                rank, host, pid, me[0]))
        return {"ok": True, "message": ""}

    def recovered(self, host, pid):
        """Under the lock: whether the survivors went on without a rank: it was declared silent (/silent) and rank 0
        reported a failure reset since (a rank allowed to go on may still fail to declare it to MPI: a thread level
        below MPI_THREAD_MULTIPLE, an Open MPI without the entry point)."""
        at = self.declared.get((host, pid))
        return at is not None and any(reason == "failure" and t >= at[1] for t, reason, _ in self.reasons)

    def log(self, payload):
        """Handler of `/log`: a rank's message, as one cleaned line (protocol.check_log)."""
        self._say(protocol.check_log(payload))
        return {"ok": True}

    def handlers(self):
        """The server's handler table, {path: handler}."""
        return {protocol.HOSTS: self.hosts, protocol.RESET: self.reset, protocol.LOG: self.log,
                protocol.START: self.exits.start, protocol.EXIT: self.exits.record, protocol.END: self.end,
                protocol.SILENT: self.silent}
