"""The slot launcher's driver side: runs one tfring job on processes some scheduler (Spark tasks, Ray actors)
already started on the cluster ("slots"), so that the ranks are children of those processes, not of the driver.

    job = SlotJob(num_slots, bind_host).start()        # the driver service (tfring.common.signed_channel: HMAC'd JSON)
    ... the scheduler starts num_slots processes that each call
        tfring.runner.slot_task.serve_slot(job.address, job.secret, index) ...
    job.wait_ready(timeout)                            # every slot registered (host identity, task service)
    results = job.call(fn, args, kwargs)               # each rank's return value, in rank order (any number of calls)
    job.slot_of(rank)                                  # which slot each rank belongs to (after a call)
    job.stop(); job.close()

Slot 0 is the launcher: it runs mpirun (built by tfring.runner.launch.plan, so it gets the usual flags) with its
own host as `localhost` and every other host under a made-up name (tfring-slot-host-N) that PRRTE launches
through tfring.runner.slot_agent: the agent asks that host's first slot to run the PRRTE daemon as its child. The
ranks run tfring.runner.slot_rank, which fetches calls from this service and posts results back. Why mpirun runs in
slot 0 and not in the driver: PRRTE 3.0 never uses loopback for a remote daemon's out-of-band channel, so a job on
one machine (Spark local mode) would have to send its daemons' traffic over a real interface; with mpirun in a
slot, the ranks of the launcher's host are local to mpirun and one host needs no daemon at all.

Each rank dies with its own slot (slot_rank's watchdog: on a host, ranks take the host's slots in local rank order)
and tells the driver which slot it belongs to. A call in which a rank raised fails with RankError; if some other
rank did not return within SETTLE seconds (blocked in a collective?), the job is broken and later calls fail at
once."""
import base64
import ipaddress
import os
import sys
import threading
import time

import cloudpickle

from tfring.common.signed_channel import BadRequest, DriverServer, new_secret

DRIVER_ENV = "TFRING_SLOT_DRIVER"  # "host:port" of the driver service, for the ranks
SECRET_ENV = "TFRING_SLOT_SECRET"  # the job's secret: in environments only, forwarded by name
HOSTS_ENV = "TFRING_SLOT_HOSTS"  # JSON {made-up host name: task service "host:port"}, for the agent
MAP_ENV = "TFRING_SLOT_MAP"  # JSON [[[slot index, pid, start time], ...] per host], for the ranks' watchdogs
SLOT_ENV = "TFRING_SLOT_INDEX"  # set in each rank: the slot it belongs to
MAX_BODY = 256 << 20  # pickled functions and results travel in these messages
SERVICE = "tfring slot driver"
TASK_SERVICE = "tfring task service"
CALL_WAIT = 5.0  # seconds a rank's /call waits for work before it is told to ask again
SLOT_SILENCE = 30.0  # seconds without a slot's status poll before the slot counts as dead (polls every second)
STOP_SILENCE = 3.0  # seconds without slot 0's poll after which stop() no longer waits for mpirun's exit
SETTLE = 10.0  # seconds the other ranks have to return after one raised, before the job counts as broken
LOCAL_HOST = "localhost"  # the launcher's host: PRRTE starts its ranks itself
HOST_NAME = "tfring-slot-host-%d"  # every other host: unresolvable, so PRRTE launches it through the agent


def encode(obj):
    """cloudpickle + base64, for JSON messages (functions and closures travel by value).

    Args:
        obj: any picklable object.

    Returns:
        str: the encoded text.
    """
    return base64.b64encode(cloudpickle.dumps(obj)).decode("ascii")


def decode(text):
    """The inverse of `encode`. Only ever called on a message whose signature was verified.

    Args:
        text: what `encode` returned.

    Returns:
        object: the unpickled object.
    """
    return cloudpickle.loads(base64.b64decode(text))


def _stat(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid):
    """A process's start time (field 22 of /proc/PID/stat): tells a process from a later one that reused its pid.

    Args:
        pid: the process id.

    Returns:
        str: the start time in clock ticks since boot, or None when the process does not exist (or no /proc).
    """
    fields = _stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


def alive(pid, started=None):
    """Whether a process still runs (and is the one that started at `started`, when given). A zombie is dead: a
    killed slot stays one until its parent (e.g. a scheduler's worker) reaps it.

    Args:
        pid: the process id.
        started: what `start_time` returned for it, or None.

    Returns:
        bool
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat(pid)
    if fields is None:  # gone since kill(0), or no /proc at all (then kill(0) is all there is to tell)
        return not os.path.isdir("/proc/self")
    return fields[0] not in ("Z", "X") and (started is None or fields[19] == started)


class RankError(RuntimeError):
    """A rank raised in a `SlotJob.call`.

    Args:
        rank: the rank that raised (the lowest, when several did).
        trace: its formatted traceback.
    """

    def __init__(self, rank, trace):
        super().__init__("tfring: rank %d raised:\n%s" % (rank, trace))
        self.rank, self.traceback = rank, trace


def _int(payload, key, low=0, high=None):
    value = payload.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value >= high):
        raise BadRequest("%s: expected an integer in [%d, %s), got %r" % (key, low, high, value))
    return value


def _network(payload):
    value = payload.get("network")
    if value is None:
        return None
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except (TypeError, ValueError):
        raise BadRequest("network: expected an address/prefix, got %r" % (value,)) from None


def _str(payload, key):
    value = payload.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest("%s: expected a non-empty string" % key)
    return value


class SlotJob:
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

    def __init__(self, num_slots, bind_host, secret=None, env=None, launch_args=(), executable=None, stdout=None,
                 stderr=None, log=None):
        if not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError("num_slots: expected a positive integer, got %r" % (num_slots,))
        self.num_slots, self.secret = num_slots, secret or new_secret()
        self._env, self._launch_args, self._executable = env, list(launch_args), executable
        self._out, self._err = stdout, stderr
        self._cond = threading.Condition()
        self._slots = {}  # index -> {"host", "address", "seen"}
        self._launched = self._stopping = False
        self._exit = None  # (rc, summary) of mpirun, from the launcher
        self._failed = None  # why the job cannot go on (a slot died or restarted)
        self._broken = None  # why no more calls can run (ranks may be stuck in a collective after one raised)
        self._settling = None  # (seq, deadline, ranks that answered) of a call in which a rank raised
        self._rank_slot = {}  # rank -> slot index, as each rank reports it
        self._gone = {}  # slot index -> the rank whose watchdog saw that slot's process die
        self._names = {}  # made-up PRRTE host name -> "slot N (host H)", for mpirun's messages
        self._calls = {}  # seq -> encoded (fn, args, kwargs)
        self._results = {}  # seq -> {rank: (ok, value)}
        self._seq = 0
        self._start_timeout = 600
        self._server = DriverServer(bind_host, self.secret, {
            "/register": self._register, "/status": self._status, "/output": self._output, "/exit": self._exit_of,
            "/call": self._call, "/result": self._result, "/gone": self._gone_of},
            log=log, name=SERVICE, max_body=MAX_BODY)

    @property
    def address(self):
        """Where the slots and ranks reach the service.

        Returns:
            str: "host:port".
        """
        return self._server.address

    @property
    def launched(self):
        """Whether slot 0 was handed the job (mpirun may be running).

        Returns:
            bool
        """
        return self._launched

    def start(self):
        """Starts serving.

        Returns:
            SlotJob: self.
        """
        self._server.start()
        return self

    # -- handlers (each payload is authenticated; anything unexpected is a 400) --

    def _register(self, p):
        index = _int(p, "index", 0, self.num_slots)
        pid, started = p.get("pid"), p.get("started")
        slot = {"host": _str(p, "host"), "address": _str(p, "address"), "seen": time.monotonic(),
                "pid": pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else 0,
                "started": started if isinstance(started, str) else None,
                "network": _network(p)}
        with self._cond:
            old = self._slots.get(index)
            if old is not None and old["address"] != slot["address"]:
                # The scheduler restarted the slot (executor lost, task retried): its ranks are gone.
                self._failed = "slot %d (host %s) was restarted by the scheduler: its process died" % (
                    index, old["host"])
                self._stopping = True
            elif old is None:
                self._slots[index] = slot
            self._cond.notify_all()
            return {"stop": self._stopping}

    def _launch_spec(self):
        hosts, names, members = [], {}, []
        for index in sorted(self._slots):  # slot 0's host first: ranks 0.. run there
            slot = self._slots[index]
            if slot["host"] not in names:
                names[slot["host"]] = len(hosts)
                hosts.append([LOCAL_HOST if not hosts else HOST_NAME % len(hosts), 0, slot["address"]])
                members.append([])
                self._names[hosts[-1][0]] = "slot %d (host %s)" % (index, slot["host"])
            hosts[names[slot["host"]]][1] += 1
            members[names[slot["host"]]].append([index, slot["pid"], slot["started"]])
        networks = [self._slots[m[0][0]]["network"] for m in members]  # each host's first slot: it runs mpirun/prted
        return {"np": self.num_slots, "hosts": hosts, "slots": members,
                "networks": networks if all(networks) else None,
                "env": dict(self._env) if self._env is not None else None, "args": self._launch_args,
                "executable": self._executable, "start_timeout": self._start_timeout}

    def _status(self, p):
        index = _int(p, "index", 0, self.num_slots)
        with self._cond:
            if index in self._slots:
                self._slots[index]["seen"] = time.monotonic()
            reply = {"stop": self._stopping}
            if index == 0 and not self._launched and not self._stopping and len(self._slots) == self.num_slots:
                self._launched = True
                reply["launch"] = self._launch_spec()
            return reply

    def _output(self, p):
        stream = self._err if p.get("stream") == "stderr" else self._out
        stream = stream or (sys.stderr if p.get("stream") == "stderr" else sys.stdout)
        data = p.get("data")
        if not isinstance(data, str):
            raise BadRequest("data: expected a string")
        stream.write(data)
        stream.flush()
        return {}

    def _exit_of(self, p):
        rc = p.get("rc")
        if not isinstance(rc, int):
            raise BadRequest("rc: expected an integer")
        with self._cond:
            self._exit = (rc, str(p.get("summary") or ""))
            self._cond.notify_all()
        return {}

    def _call(self, p):
        after = _int(p, "after", 0)
        if after == 0 and isinstance(p.get("slot"), int):  # a rank's first ask: which slot it belongs to
            with self._cond:
                self._rank_slot[_int(p, "rank", 0, self.num_slots)] = _int(p, "slot", 0, self.num_slots)
        deadline = time.monotonic() + CALL_WAIT
        with self._cond:
            while not self._stopping and self._seq <= after:
                left = deadline - time.monotonic()
                if left <= 0:
                    return {"wait": True}
                self._cond.wait(left)
            if self._stopping:
                return {"stop": True}
            seq = after + 1
            return {"seq": seq, "fn": self._calls[seq]}

    def _gone_of(self, p):
        rank, slot = _int(p, "rank", 0, self.num_slots), _int(p, "slot", 0, self.num_slots)
        with self._cond:
            self._gone.setdefault(slot, rank)
            self._cond.notify_all()
        return {}

    def _result(self, p):
        rank = _int(p, "rank", 0, self.num_slots)
        seq = _int(p, "seq", 1, self._seq + 1)
        ok, value = p.get("ok"), p.get("value")
        if not isinstance(ok, bool) or not isinstance(value, str):
            raise BadRequest("ok/value: expected a boolean and a string")
        with self._cond:
            self._results.setdefault(seq, {})[rank] = (ok, value)
            self._cond.notify_all()
        return {}

    # -- the driver's API --

    def _check(self, alive):
        if self._failed:
            raise RuntimeError("tfring: %s" % self._failed)
        now = time.monotonic()
        for index, slot in sorted(self._slots.items()):
            if now - slot["seen"] > SLOT_SILENCE:
                self._failed = "slot %d (host %s) has not been heard from for %d s: its process or host died" % (
                    index, slot["host"], SLOT_SILENCE)
                raise RuntimeError("tfring: %s" % self._failed)
        if alive is not None:
            alive()  # the scheduler's own state: raises when its job failed

    def wait_ready(self, timeout, alive=None):
        """Waits until every slot registered, then lets slot 0 start mpirun.

        Args:
            timeout: seconds to wait; what is left of it is also the ranks' start deadline.
            alive: callable raising an exception when the scheduler can no longer start the slots (e.g. its job
                failed), checked about every second, or None.

        Raises:
            TimeoutError: not every slot registered in time (the message says how many did).
            RuntimeError: a slot died or was restarted.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._slots) < self.num_slots:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        "tfring: only %d of %d slots started within %g s (registered: %s); the cluster may not be "
                        "able to run %d tasks at once, or a larger start timeout is needed" % (
                            len(self._slots), self.num_slots, timeout, sorted(self._slots) or "none",
                            self.num_slots))
                self._cond.wait(min(left, 1.0))
                self._check(alive)
            self._start_timeout = max(int(deadline - time.monotonic()), 10)

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

    def call(self, fn, args=(), kwargs=None, alive=None):
        """Runs fn(*args, **kwargs) on every rank.

        A call in which a rank raised fails at once. The other ranks then have SETTLE seconds to return: if some do
        not (they may be blocked in a collective the raising rank never joined), the job is broken and every later
        call fails (at once after that deadline; a call made before it first waits for it).

        Args:
            fn: the function (cloudpickled: closures and lambdas travel by value).
            args: positional arguments.
            kwargs: keyword arguments.
            alive: as for `wait_ready`.

        Returns:
            list: each rank's return value, in rank order.

        Raises:
            RankError: a rank raised (the lowest such rank, with its traceback).
            RuntimeError: the job is broken, mpirun ended before every rank answered, or a slot died.
        """
        payload = encode((fn, tuple(args), dict(kwargs or {})))
        with self._cond:
            self._check(None)  # a slot already lost: fail at once
            self._settle()
            if self._broken:
                raise RuntimeError("tfring: the job cannot run more calls: %s" % self._broken)
            self._seq += 1
            seq = self._seq
            self._calls[seq] = payload
            self._cond.notify_all()
            while True:
                got = self._results.get(seq, {})
                failed = sorted(r for r, (ok, _) in got.items() if not ok)
                if len(got) == self.num_slots:
                    break
                if failed:
                    self._settling = (seq, time.monotonic() + SETTLE, failed[0])
                    break
                if self._exit is not None:
                    self._broken = "mpirun exited"
                    raise self._exit_error(got)
                self._cond.wait(1.0)
                self._check(alive)
            values = self._results[seq] if failed else self._results.pop(seq)
            if not failed:
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

        Args:
            timeout: seconds to wait.

        Returns:
            bool: whether mpirun's exit was reported (True as well when it never started).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            while self._launched and self._exit is None and time.monotonic() < deadline and not self._failed:
                if time.monotonic() - self._slots[0]["seen"] > STOP_SILENCE:
                    break
                self._cond.wait(0.5)
            return not self._launched or self._exit is not None

    def close(self):
        """Stops the service (call after `stop`, once the slots had time to hear it)."""
        self._server.stop()
