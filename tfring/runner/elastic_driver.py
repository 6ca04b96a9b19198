"""tfringrun in elastic mode (--min-np, --max-np or --host-discovery-script): polls the discovery script, keeps the
available hosts (discovered minus blacklisted) and where the job's ranks are, starts `mpirun --with-ft ulfm` on
enough of them, and answers the ranks over an authenticated HTTP channel (tfring.common.signed_channel): `/hosts` (the
available hosts and the free slots the job may grow into), `/reset` (the job's placement after a failure or a
growth: blacklisting is decided here, see HostBook), `/log` (a rank's line on tfringrun's stderr) and `/exit` (each
rank's status at exit, elastic_exits.py), on one listener per interface the hosts reach (elastic_listeners.py). The
ranks shrink and grow the job themselves (ULFM shrink, MPI_Comm_spawn); this driver only keeps the books."""
import collections
import functools
import ipaddress
import os
import random
import shutil
import shlex
import socket
import sys
import tempfile
import threading
import time

from tfring.common.signed_channel import BadRequest, new_secret
from tfring.runner.elastic_exits import ExitLedger
from tfring.runner.elastic_listeners import Listeners
from tfring.runner.discovery import DiscoveryError, parse_discovery, run_discovery  # noqa: F401 (public here too)
from tfring.runner.flags import DEFAULT_SLOTS, UsageError
from tfring.runner.launch import elastic_timeout, host_list, plan_elastic, run_command
from tfring.runner.output import stamp

POLL_INTERVAL = 1.0  # seconds between discovery runs
MAX_LOG_MESSAGE = 2000  # characters of a rank's /log message


@functools.lru_cache(maxsize=1)
def _local_names():  # localhost, 127.0.0.1, the hostname (short and full) and the addresses it resolves to
    hostname = socket.gethostname()
    names = {"localhost", "127.0.0.1", "::1", hostname, hostname.split(".")[0]}
    try:
        names.add(socket.getfqdn())
        names.update(socket.gethostbyname_ex(hostname)[2])
    except OSError:
        pass
    return frozenset(n for n in names if n)


def _is_local(name):
    return name in _local_names() or name.startswith("127.")


def _is_ip(name):
    try:
        return bool(ipaddress.ip_address(name))
    except ValueError:
        return False


def canonical_host(name, known):
    """The name the driver books a rank's host under: the discovery's (or -H's) name for the same host. Ranks
    report PMIX_HOSTNAME or socket.gethostname(): this machine's names (localhost, 127.0.0.1, hostname, fqdn) match
    a known name that is local; a short name matches a full one and vice versa.

    Args:
        name: the name a rank reported.
        known: the names the driver knows, in discovery order.

    Returns:
        str: the matching known name, else `name` itself.
    """
    known = list(known)
    if name in known:
        return name
    if _is_local(name):
        for k in known:
            if _is_local(k):
                return k
    if not _is_ip(name):
        short = name.split(".")[0]
        for k in known:
            if not _is_ip(k) and k.split(".")[0] == short:
                return k
    return name


def _placement(hosts, np_):  # {host: ranks} as mpirun places np_ ranks (--map-by slot: each host's slots in turn)
    placed, left = {}, np_
    for name, slots in hosts:
        n = min(slots, left)
        if n > 0:
            placed[name] = placed.get(name, 0) + n
            left -= n
    return placed


def _choose_hosts(available, np_, max_np=None):
    # (the first available hosts whose slots hold the ranks, min(np_, available slots, max_np) ranks)
    total = sum(s for _, s in available)
    n = min(np_, total, max_np or total)
    chosen, room = [], n
    for name, slots in available:
        if room <= 0:
            break
        chosen.append((name, slots))
        room -= slots
    return chosen, n


def _bind_address(hosts):
    # 127.0.0.1 when every host is this machine, else the address of this machine's interface on the route to the
    # first remote host (a UDP connect sends no packet). Never 0.0.0.0. RuntimeError when it cannot be found.
    remote = [h for h in hosts if not _is_local(h)]
    if not remote:
        return "127.0.0.1"
    try:
        target = socket.getaddrinfo(remote[0], None, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]
    except OSError as e:
        raise RuntimeError("cannot resolve host %s: %s" % (remote[0], e.strerror or e)) from None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))
            address = s.getsockname()[0]
    except OSError as e:
        raise RuntimeError("no route to host %s (%s): %s" % (remote[0], target, e.strerror or e)) from None
    if address in ("", "0.0.0.0"):
        raise RuntimeError("no interface address on the route to host %s (%s)" % (remote[0], target))
    return address


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
            payload: {"rank": r} (unused beyond a type check).

        Returns:
            dict: {"generation", "hosts": [[host, slots]], "add": [[host, n]], "size", "blacklisted"}; "add": each
            available host's slots minus the job's ranks there and its held-out slots, capped so that size + added
            <= --max-np.

        Raises:
            BadRequest: "rank" is not an integer.
        """
        if not isinstance(payload.get("rank", 0), int):
            raise BadRequest("'rank' must be an integer")
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
            payload: {"hosts": [host of each rank, in rank order], "reason": "failure" | "grow"}.

        Returns:
            dict: {"ok": True, "resets": count so far, "generation": g}.

        Raises:
            BadRequest: a missing or mistyped field.
        """
        hosts, reason = payload.get("hosts"), payload.get("reason")
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
            raise BadRequest("'hosts' must be a non-empty list of host names")
        if reason not in ("failure", "grow"):
            raise BadRequest("'reason' must be 'failure' or 'grow'")
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
        message = payload.get("message")
        if not isinstance(message, str):
            raise BadRequest("'message' must be a string")
        text = "".join(c if c.isprintable() else " " for c in " ".join(message.split()))
        self._say(text[:MAX_LOG_MESSAGE])
        return {"ok": True}

    def handlers(self):
        """The server's handler table.

        Returns:
            dict: {path: handler}.
        """
        return {"/hosts": self.hosts, "/reset": self.reset, "/log": self.log}


class _Poller:
    """Runs discover() every `interval` s on a daemon thread into the book; a failed run is logged (once per
    distinct error) and ignored: the last good result stays."""

    def __init__(self, discover, book, say, label, interval=POLL_INTERVAL):
        self.discover, self.book, self.say, self.label, self.interval = discover, book, say, label, interval
        self._stop, self._thread, self._last_error = threading.Event(), None, None

    def poll_once(self, then="this poll is ignored"):
        try:
            hosts = self.discover()
        except DiscoveryError as e:
            if str(e) != self._last_error:
                self.say("%s: %s; %s" % (self.label, e, then))
            self._last_error = str(e)
            self.book.refresh()
            return False
        self._last_error = None
        self.book.set_discovered(hosts)
        return True

    def _loop(self):
        while not self._stop.wait(self.interval):
            self.poll_once()

    def start(self):
        self._thread = threading.Thread(target=self._loop, name="tfring-elastic-discovery", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)  # a daemon thread: a slow discovery run does not hold tfringrun's exit


def _wait_for_slots(book, need, timeout, say):
    deadline = time.monotonic() + timeout
    if sum(s for _, s in book.refresh()) < need:
        say("waiting up to %d s (--elastic-timeout) for --min-np %d slots" % (timeout, need))
    while sum(s for _, s in book.refresh()) < need:
        if time.monotonic() >= deadline:
            say("only %d slots available after %d s (--min-np %d)" % (sum(s for _, s in book.refresh()), timeout,
                                                                      need))
            return False
        time.sleep(0.2)
    return True


def _hosts_with_drivers(book, listeners, payload):
    # /hosts, plus for each host offered for growth the driver's address on the route to it (rank 0 passes it to
    # the processes it spawns there: a job started on 127.0.0.1 alone is not reachable from a new remote host).
    reply = book.hosts(payload)
    reply["drivers"] = listeners.drivers_for(reply["add"])
    return reply


def _finished(exits, rc):
    size = exits.finished_size()
    if size is None:
        return None
    return ("every rank of the final %d reported success, but mpirun ended with exit code %d after them (Open MPI "
            "5.0.11 can crash in its teardown after a spawn onto an added host; see docs/elastic.md): the job "
            "succeeded" % (size, rc))


def _launch_until_done(args, book, exits, listeners, secret, state_dir, environ, stderr, say, timeout):
    """Runs mpirun; when Open MPI lost a host (ULFM survives lost processes, not lost hosts: PRRTE ends the
    job), blacklists it and starts the job again on the remaining hosts, resuming from the last commit on disk."""
    extra = {"TFRING_ELASTIC_STATE_DIR": state_dir}
    while True:
        available = book.refresh()
        hosts, np_ = _choose_hosts(available, args.np, args.max_num_proc)
        try:
            address = listeners.address_for([h for h, _ in hosts])
        except (RuntimeError, OSError) as e:
            say("cannot serve the ranks on %s: %s" % (",".join(h for h, _ in hosts), e))
            return 1
        cmd, env = plan_elastic(args, hosts, np_, address, secret, environ, extra_env=extra)
        book.set_placement(hosts, np_)
        if args.verbose:
            print("tfringrun: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        report = {}
        exits.clear()
        rc = run_command(cmd, args.output_filename, stderr=stderr, env=env,
                         timestamp_output=bool(args.prefix_output_with_timestamp),
                         timestamp_logs=bool(args.log_with_timestamp), start_timeout=args.start_deadline,
                         num_ranks=args.num_ranks, report=report, finished=functools.partial(_finished, exits))
        lost = report.get("lost_host")
        if rc == 0 or not (lost or rc < 0):
            return rc
        # A lost host, or mpirun itself killed by a signal (Open MPI 5.0.11's prterun can crash while spawning
        # onto an added host, docs/elastic.md): either way the ranks are gone and the job restarts.
        what = "lost host %s" % lost if lost else "mpirun died of signal %d" % -rc
        resets = book.lost(lost)
        if args.reset_limit is not None and resets > args.reset_limit:
            say("%s; the job was reset %d times (--reset-limit %d): not restarting it" % (
                what, resets, args.reset_limit))
            return rc if rc > 0 else 1
        say("%s: starting the job again on the %s hosts from the last commit" % (
            what, "remaining" if lost else "available"))
        if not _wait_for_slots(book, args.min_num_proc, timeout, say):
            return rc if rc > 0 else 1
        extra["TFRING_ELASTIC_RESTART"] = "1"


def _fixed_hosts(args):  # without a discovery script: -H, --hostfile, else localhost with -np slots
    hosts = host_list(args) or [("localhost", args.np)]
    total = sum(s for _, s in hosts)
    if total < args.min_num_proc:
        raise UsageError("--min-np: %d is more than the %d slots of %s" % (
            args.min_num_proc, total, "-H" if args.hosts else "--hostfile"))
    return hosts


def run_elastic(args, environ=None, stderr=None):
    """tfringrun in elastic mode: discovery, the driver's server, mpirun; returns when mpirun exits.

    Args:
        args: parsed, checked arguments (flags.is_elastic(args) is true).
        environ: the launcher's environment (default os.environ).
        stderr: where tfringrun's own lines go (default sys.stderr).

    Returns:
        int: mpirun's exit code (0: the job succeeded); 1 when discovery fails at once or too few slots come
        within --elastic-timeout; 130 on Ctrl-C while waiting.

    Raises:
        UsageError: a bad host list or environment value.
    """
    stderr = stderr or sys.stderr
    environ = os.environ if environ is None else environ
    timeout = elastic_timeout(args, environ)

    def say(message):
        stderr.write("%stfringrun: elastic: %s\n" % (stamp() + " " if args.log_with_timestamp else "", message))
        stderr.flush()

    if args.host_discovery_script:
        label = "--host-discovery-script %s" % args.host_discovery_script
        discover = functools.partial(run_discovery, args.host_discovery_script, args.slots or DEFAULT_SLOTS)
    else:
        label, discover = "hosts", _fixed_hosts(args).copy
    book = HostBook(args.max_num_proc, args.cooldown_range, args.reset_limit, say)
    poller = _Poller(discover, book, say, label)
    if not poller.poll_once(then="the first run must succeed (as horovodrun)"):
        return 1
    poller.start()
    try:
        if not _wait_for_slots(book, args.min_num_proc, timeout, say):
            return 1
        secret = new_secret()
        try:
            exits = ExitLedger()
            handlers = dict(book.handlers(), **{"/exit": exits.record})
            listeners = Listeners(_bind_address, secret, handlers, log=stderr)
            handlers["/hosts"] = functools.partial(_hosts_with_drivers, book, listeners)
            listeners.address_for([h for h, _ in book.refresh()])  # fails early, as before the first launch
        except (RuntimeError, OSError) as e:
            say("cannot start the driver: %s" % e)
            return 1
        state_dir = tempfile.mkdtemp(prefix="tfring-elastic-")  # mode 0700: committed state for a restart
        try:
            return _launch_until_done(args, book, exits, listeners, secret, state_dir, environ, stderr, say, timeout)
        finally:
            listeners.stop()
            shutil.rmtree(state_dir, ignore_errors=True)
    except KeyboardInterrupt:
        say("stopped while waiting for slots")
        return 130
    finally:
        poller.stop()
