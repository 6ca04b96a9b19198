"""The slot launcher's driver side: runs one tfring job on processes some scheduler (Spark tasks, Ray actors)
already started on the cluster ("slots"), so that the ranks are children of those processes, not of the driver.

    job = SlotJob(num_slots, bind_host).start()        # the driver service (tfring.elastic.protocol: HMAC'd JSON)
    ... the scheduler starts num_slots processes that each call
        tfring.runner.slot_task.serve_slot(job.address, job.secret, index) ...
    job.wait_ready(timeout)                            # every slot registered (host identity, task service)
    results = job.call(fn, args, kwargs)               # each rank's return value, in rank order (any number of calls)
    job.stop(); job.close()

Slot 0 is the launcher: it runs mpirun (built by tfring.runner.launch.plan, so it gets the usual flags) with its
own host as `localhost` and every other host under a made-up name (tfring-slot-host-N) that PRRTE launches
through tfring.runner.slot_agent: the agent asks that host's first slot to run the PRRTE daemon as its child. The
ranks run tfring.runner.slot_rank, which fetches calls from this service and posts results back. Why mpirun runs in
slot 0 and not in the driver: PRRTE 3.0 never uses loopback for a remote daemon's out-of-band channel, so a job on
one machine (Spark local mode) would have to send its daemons' traffic over a real interface; with mpirun in a
slot, the ranks of the launcher's host are local to mpirun and one host needs no daemon at all."""
import base64
import sys
import threading
import time

import cloudpickle

from tfring.elastic.protocol import BadRequest, DriverServer, new_secret

DRIVER_ENV = "TFRING_SLOT_DRIVER"  # "host:port" of the driver service, for the ranks
SECRET_ENV = "TFRING_SLOT_SECRET"  # the job's secret: in environments only, forwarded by name
HOSTS_ENV = "TFRING_SLOT_HOSTS"  # JSON {made-up host name: task service "host:port"}, for the agent
MAX_BODY = 256 << 20  # pickled functions and results travel in these messages
SERVICE = "tfring slot driver"
TASK_SERVICE = "tfring task service"
CALL_WAIT = 5.0  # seconds a rank's /call waits for work before it is told to ask again
SLOT_SILENCE = 30.0  # seconds without a slot's status poll before the slot counts as dead (polls every second)
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


def _int(payload, key, low=0, high=None):
    value = payload.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value >= high):
        raise BadRequest("%s: expected an integer in [%d, %s), got %r" % (key, low, high, value))
    return value


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
        self._calls = {}  # seq -> encoded (fn, args, kwargs)
        self._results = {}  # seq -> {rank: (ok, value)}
        self._seq = 0
        self._start_timeout = 600
        self._server = DriverServer(bind_host, self.secret, {
            "/register": self._register, "/status": self._status, "/output": self._output, "/exit": self._exit_of,
            "/call": self._call, "/result": self._result}, log=log, name=SERVICE, max_body=MAX_BODY)

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
        slot = {"host": _str(p, "host"), "address": _str(p, "address"), "seen": time.monotonic()}
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
        hosts, names = [], {}
        for index in sorted(self._slots):  # slot 0's host first: ranks 0.. run there
            slot = self._slots[index]
            if slot["host"] not in names:
                names[slot["host"]] = len(hosts)
                hosts.append([LOCAL_HOST if not hosts else HOST_NAME % len(hosts), 0, slot["address"]])
            hosts[names[slot["host"]]][1] += 1
        return {"np": self.num_slots, "hosts": hosts, "env": dict(self._env) if self._env is not None else None,
                "args": self._launch_args, "executable": self._executable, "start_timeout": self._start_timeout}

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

    def call(self, fn, args=(), kwargs=None, alive=None):
        """Runs fn(*args, **kwargs) on every rank.

        Args:
            fn: the function (cloudpickled: closures and lambdas travel by value).
            args: positional arguments.
            kwargs: keyword arguments.
            alive: as for `wait_ready`.

        Returns:
            list: each rank's return value, in rank order.

        Raises:
            RuntimeError: a rank raised (the message names the rank and has its traceback), mpirun ended before every
                rank answered, or a slot died.
        """
        payload = encode((fn, tuple(args), dict(kwargs or {})))
        with self._cond:
            self._seq += 1
            seq = self._seq
            self._calls[seq] = payload
            self._cond.notify_all()
            while True:
                got = self._results.get(seq, {})
                failed = sorted(r for r, (ok, _) in got.items() if not ok)
                if failed:
                    rank = failed[0]
                    raise RuntimeError("tfring: rank %d raised:\n%s" % (rank, got[rank][1]))
                if len(got) == self.num_slots:
                    break
                if self._exit is not None:
                    missing = sorted(set(range(self.num_slots)) - set(got))
                    raise RuntimeError("tfring: mpirun exited with code %d before rank%s %s returned%s" % (
                        self._exit[0], "s" if len(missing) > 1 else "", ",".join(map(str, missing)),
                        ": " + self._exit[1] if self._exit[1] else ""))
                self._cond.wait(1.0)
                self._check(alive)
            del self._calls[seq]
            values = self._results.pop(seq)
        return [decode(values[rank][1]) for rank in range(self.num_slots)]

    def stop(self, timeout=15.0):
        """Tells the ranks and slots to stop and waits (at most `timeout` s) until mpirun has exited.

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
                self._cond.wait(0.5)
            return not self._launched or self._exit is not None

    def close(self):
        """Stops the service (call after `stop`, once the slots had time to hear it)."""
        self._server.stop()
