"""The driver service of a slot job, the side the slots and ranks talk to: registers the slots, hands slot 0 the
job to launch (`/status`), serves calls to the ranks (`/call`) and collects their results (`/result`), relays
output (`/output`) and records mpirun's exit (`/exit`) and dead slots (`/gone`). SlotJob (job.py) is the driver's
API on top of it.

Any request or reply may be lost; every handler is idempotent and every report is repeated until acknowledged:
the launch spec goes in every `/status` reply to slot 0 until a poll says `launched`; slot 0 repeats mpirun's exit
(or its launch failure) in every `/status` until a reply says `exit_ack`, besides retrying `/exit` until `ack`."""
import sys
import threading
import time

from tfring.common.signed_channel import BadRequest, new_secret
from tfring.common.signed_server import DriverServer
from tfring.runner.slots.waits import LockedWaits
from tfring.runner.slots.wire import MAX_BODY, SERVICE, network_field, text_field
LOCAL_HOST = "localhost"  # the launcher's host: PRRTE starts its ranks itself
HOST_NAME = "tfring-slot-host-%d"  # every other host: unresolvable, so PRRTE launches it through the agent


def _int(payload, key, low=0, high=None):
    value = payload.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value >= high):
        raise BadRequest("%s: expected an integer in [%d, %s), got %r" % (key, low, high, value))
    return value


class SlotService(LockedWaits):
    """The handlers and state of a slot job's driver service (arguments: see SlotJob)."""

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
        self._launch_error = None  # why slot 0 could not start mpirun (bad arguments, no mpirun)
        self._spec = None  # the launch spec, built once: it is resent until slot 0 acknowledges it
        self._launch_acked = False
        self._ready_at = None  # when the last slot registered: the launch ack's deadline counts from here
        self._failed = None  # why the job cannot go on (a slot died or restarted)
        self._broken = None  # why no more calls can run (ranks may be stuck in a collective after one raised)
        self._settling = None  # (seq, deadline, ranks that answered) of a call in which a rank raised
        self._rank_slot = {}  # rank -> slot index, as each rank reports it
        self._gone = {}  # slot index -> the rank whose watchdog saw that slot's process die
        self._names = {}  # made-up PRRTE host name -> "slot N (host H)", for mpirun's messages
        self._calls = {}  # seq -> encoded (fn, args, kwargs)
        self._results = {}  # seq -> {rank: (ok, value)}
        self._seq = 0
        self._start_deadline = None  # the ranks must start by then (SlotJob.wait_ready's deadline)
        self._server = DriverServer(bind_host, self.secret, {
            "/register": self._register, "/status": self._status, "/output": self._output, "/exit": self._exit_of,
            "/call": self._call, "/result": self._result, "/gone": self._gone_of},
            log=log, name=SERVICE, max_body=MAX_BODY, clients=2 * num_slots)  # each slot polls, each rank long-polls

    @property
    def address(self):
        """Where the slots and ranks reach the service.

        Returns:
            str: "host:port".
        """
        return self._server.address

    @property
    def ready(self):
        """Whether every slot registered.

        Returns:
            bool
        """
        with self._cond:
            return len(self._slots) == self.num_slots

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
        slot = {"host": text_field(p, "host"), "address": text_field(p, "address"), "seen": time.monotonic(),
                "pid": pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else 0,
                "started": started if isinstance(started, str) else None,
                "network": network_field(p)}
        with self._cond:
            old = self._slots.get(index)
            if old is not None and old["address"] != slot["address"]:
                # The scheduler restarted the slot (executor lost, task retried): its ranks are gone.
                self._failed = "slot %d (host %s) was restarted by the scheduler: its process died" % (
                    index, old["host"])
                self._stopping = True
            elif old is None:
                self._slots[index] = slot
                if len(self._slots) == self.num_slots:
                    self._ready_at = time.monotonic()
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
                "executable": self._executable,
                "start_timeout": max(int(self._start_deadline - time.monotonic()), 10) if self._start_deadline else 600}

    def _status(self, p):
        index = _int(p, "index", 0, self.num_slots)
        report = p.get("exit") if index == 0 else None
        if report is not None and not isinstance(report, dict):
            raise BadRequest("exit: expected an object")
        with self._cond:
            if index in self._slots:
                self._slots[index]["seen"] = time.monotonic()
            reply = {"stop": self._stopping}
            if index == 0 and p.get("launched") is True and not self._launch_acked:
                self._launch_acked = True
                self._cond.notify_all()
            elif index == 0 and self._stopping and not self._launch_acked and p.get("launched") is not True:
                self._launched = False  # the spec was lost and is no longer sent: no mpirun for stop() to wait for
                self._cond.notify_all()
            if report is not None:
                self._record_exit(report)
                reply["exit_ack"] = True
            if index == 0 and not self._launch_acked and not self._stopping and len(self._slots) == self.num_slots:
                # Resent in every reply until acknowledged: a lost reply must not leave the job unlaunched.
                self._launched = True
                self._spec = self._spec or self._launch_spec()
                reply["launch"] = self._spec
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

    def _record_exit(self, p):
        # Under the lock. The first report wins: /exit and /status repeat the same one.
        rc, error = p.get("rc"), p.get("error")
        if not isinstance(rc, int) or isinstance(rc, bool):
            raise BadRequest("rc: expected an integer")
        if error is not None and not isinstance(error, str):
            raise BadRequest("error: expected a string")
        if self._exit is None:
            self._exit = (rc, str(p.get("summary") or ""))
            self._launch_error = error
            self._launch_acked = True  # a launch that failed was received all the same
            self._cond.notify_all()

    def _exit_of(self, p):
        with self._cond:
            self._record_exit(p)
        return {"ack": True}

    def _call(self, p):
        after = _int(p, "after", 0)
        if after == 0 and isinstance(p.get("slot"), int):  # a rank's first ask: which slot it belongs to
            with self._cond:
                self._rank_slot[_int(p, "rank", 0, self.num_slots)] = _int(p, "slot", 0, self.num_slots)
        with self._cond:
            reply = self._wait_for_call(after)
            if reply is not None:
                return reply
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
            if seq in self._calls:  # a retry after the call completed (its reply was lost) is acknowledged, dropped
                self._results.setdefault(seq, {})[rank] = (ok, value)
                self._cond.notify_all()
        return {}
