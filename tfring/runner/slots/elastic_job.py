"""An elastic tfring job on a scheduler's processes (Spark tasks, Ray actors): tfring.spark.run_elastic and
tfring.ray.ElasticRayExecutor.

    job = ElasticSlotJob(num_proc, min_np, max_np, bind_host).start()
    ... the scheduler starts processes that each call tfring.runner.slots.task.serve_slot(job.address,
        job.secret, index), any number of them, at any time, under any index (the same index again: a restart) ...
    job.wait_ready(timeout)                        # num_proc slots registered: mpirun started on them
    results = job.call(fn, args, kwargs)           # the final ranks' values, in rank order
    job.stop(); job.close()

Unlike the fixed-size SlotJob, mpirun runs in this (the driver's) process, under `--with-ft ulfm`: every slot only
hosts ranks, so losing any slot, rank 0's included, is a process failure the survivors shrink past in well under a
second (tfring.common.elastic: roll back to the last commit, no process restarted). Each rank dies with its slot
(the watchdog of rank.py; the slot of each rank is assigned here, `TFRING_SLOT_ASSIGN`). A slot that registers
while the job runs is offered to rank 0 (`/hosts`), which spawns a rank onto it (`MPI_Comm_spawn`) at the next
commit; a slot on a host the job does not run on (Open MPI 5.0.11 cannot add one to a running job) makes the driver
start the job again on every live slot at that commit. Commits also go to disk (each host's first rank, into this
driver's private directory), so when mpirun dies, loses a host, or its ranks die while a call runs, mpirun starts
again on the live slots and the ranks resume from the last commit (never twice in a row without a commit between).
What is not survived: losing the driver (docs/elastic.md)."""
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time

from tfring.common import launch_env
from tfring.common.signed_channel import BadRequest, new_secret
from tfring.common.signed_server import DriverServer
from tfring.common.elastic.protocol import integer as _int
from tfring.common.elastic.checkpoint import COMMIT_DIR
from tfring.runner.elastic.book import ElasticBook
from tfring.runner.slots.elastic_calls import NOTE_RE, ranked
from tfring.runner.slots.registered import RegisteredSlots
from tfring.runner.slots.relaunch import Relaunching
from tfring.runner.slots.slot_ender import SlotEnder
from tfring.runner.slots.job import LaunchError, RankError
from tfring.runner.slots.launcher import HERE
from tfring.runner.env import forwarded
from tfring.runner.processes import alive
from tfring.runner.slots.net import host_identity
from tfring.runner.slots.waits import LockedWaits, check_seconds
from tfring.runner.slots.wire import MAX_BODY, SERVICE, decode, encode, network_field, text_field

SLOT_SILENCE = 30.0  # seconds without a slot's status poll (every second) before it counts as dead


# What a rank spawned on another host must be told (it starts from that host's daemon's environment, not mpirun's):
# the job's non-secret settings (the secret: the daemon's environment; the rest: the driver's /env).
_FORWARD = (launch_env.ELASTIC, launch_env.ELASTIC_DRIVER, launch_env.ELASTIC_MIN_NP, launch_env.ELASTIC_MAX_NP,
            launch_env.ELASTIC_TIMEOUT, launch_env.ELASTIC_RESET_LIMIT, launch_env.ELASTIC_COMMAND,
            launch_env.SLOT_DRIVER, COMMIT_DIR, launch_env.ELASTIC_STATE_DIR, launch_env.ELASTIC_DISCOVERY,
            launch_env.ELASTIC_LAUNCH)


class ElasticSlotJob(Relaunching, LockedWaits):
    """The driver of an elastic slot job: the slots' service, the elastic ranks' channel, mpirun, the calls.

    Args:
        num_proc: ranks to start with (mpirun starts once that many slots registered).
        min_np: fewest ranks the job goes on with.
        max_np: most ranks (None: no limit).
        bind_host: the address both services listen on (this machine's on the route to the slots; never a wildcard).
        env: the ranks' environment (default this process's).
        launch_args: more tfringrun arguments (e.g. ["--network-interfaces", "eth0"]).
        executable: the ranks' Python (default this process's).
        elastic_timeout: seconds a reset may take, and below min_np the wait for new slots.
        reset_limit: most resets (None: no limit).
        stdout, stderr: where the ranks' output goes (default this process's).
        log: where refused requests are logged.
        who: what messages start with ("tfring.spark.run_elastic").
        on_report: called with each JSON object a rank sends by `tfring.ray.ray_logger.log` (`/report`), one at a
            time in a thread of its own, or None.
        local_host: the host identity of this process (default `host_identity()`; tests on emulated hosts).

    Raises:
        ValueError: inconsistent sizes or timeouts.
    """

    def __init__(self, num_proc, min_np, max_np, bind_host, env=None, launch_args=(), executable=None,
                 elastic_timeout=600, reset_limit=None, stdout=None, stderr=None, log=None, who="tfring",
                 on_report=None, local_host=None):
        for name, value in (("num_proc", num_proc), ("min_np", min_np)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError("%s: %s=%r: expected a positive integer" % (who, name, value))
        if max_np is not None and (not isinstance(max_np, int) or isinstance(max_np, bool) or max_np < num_proc):
            raise ValueError("%s: max_np=%r: expected an integer >= num_proc (%d) or None" % (who, max_np, num_proc))
        if min_np > num_proc:
            raise ValueError("%s: min_np=%d is more than num_proc=%d" % (who, min_np, num_proc))
        check_seconds("elastic_timeout", elastic_timeout)
        if elastic_timeout < 1:
            raise ValueError("%s: elastic_timeout=%r: expected at least 1 second" % (who, elastic_timeout))
        if reset_limit is not None and (not isinstance(reset_limit, int) or isinstance(reset_limit, bool)
                                        or reset_limit < 0):
            raise ValueError("%s: reset_limit=%r: expected a non-negative integer or None" % (who, reset_limit))
        self.num_proc, self.min_np, self.max_np, self.who = num_proc, min_np, max_np, who
        self.secret = new_secret()
        self._env, self._launch_args, self._executable = env, list(launch_args), executable
        self._timeout, self._reset_limit = elastic_timeout, reset_limit
        self._out, self._err = stdout, stderr
        self._cond = threading.Condition()
        local = local_host or ("tfring-driver" if os.environ.get(launch_env.SLOT_HOST_ID) else host_identity())
        self.slots = RegisteredSlots(self._cond, local, self._say)
        self.slots.regrow = self._regrow
        self.book = ElasticBook(self.slots, max_np, reset_limit, self._say, forward=_FORWARD)
        self.book.ender = self.ender = SlotEnder(self._cond, self.slots, self._start_again,
                                                 recovered=self.book.recovered)
        self._exit = self._launch_error = None
        self._relaunch, self._launches = None, 0  # why mpirun must start again, until it does; launches so far
        # /hosts requests (rank 0 makes one at each commit): a relaunch needs one since the last, save the first
        # after a fault that is Open MPI's own (a signal, a lost host): a job crashing at start is not relaunched.
        self._requests_at_launch, self._idle_relaunch = 0, False  # book.host_requests at the launch
        self._state_dir = tempfile.mkdtemp(prefix="tfring-elastic-")  # mode 0700: the commits a relaunch resumes
        self._stopping = self._broken = False
        self._calls, self._results, self._seq = {}, {}, 0
        self._launch_thread, self._closed, self.launcher = None, threading.Event(), None
        clients = 2 * (max_np or max(num_proc, 64)) + 8  # each slot polls, each rank long-polls
        self._server = DriverServer(bind_host, self.secret, {
            "/register": self._register, "/status": self._status, "/output": self._output, "/exit": self._exit_of,
            "/call": self._call, "/result": self._result, "/gone": self._gone, "/where": self._where,
            "/env": self._job_env},
            log=log, name=SERVICE, max_body=MAX_BODY, clients=clients)
        self._on_report, self._reports = on_report, queue.Queue()
        self._ranks = {}  # slot index -> [pid, start time] of its rank, when it runs on this machine's host
        self._asked = set()  # slots whose rank asked for a call
        self._launched_at = None
        self._elastic = DriverServer(bind_host, self.secret, dict(self.book.handlers(), **{"/report": self._report}),
                                     log=log, clients=clients)

    @property
    def address(self):
        """The slots' service, "host:port" (what serve_slot needs, with the secret)."""
        return self._server.address

    def start(self):
        """Starts both services (and the thread that runs the ray_logger callbacks).

        Returns:
            ElasticSlotJob: self.
        """
        self._server.start()
        try:
            self._elastic.start()
        except BaseException:
            self._server.stop()
            raise
        if self._on_report is not None:
            threading.Thread(target=self._run_reports, name="tfring-elastic-reports", daemon=True).start()
        return self

    def _run_reports(self):
        # One at a time, in the order received, off the ranks' requests (a slow callback must not time out a rank).
        while True:
            info = self._reports.get()
            if info is None:
                return
            try:
                self._on_report(info)
            except Exception as e:  # noqa: BLE001 - a user's callback must not end the job
                self._say("a ray_logger callback raised %s: %s" % (type(e).__name__, e))

    def _say(self, message):
        stream = self._err or sys.stderr
        stream.write("%s: %s\n" % (self.who, message))
        stream.flush()

    # -- the slots' handlers --

    def _register(self, p):
        index, pid, started = _int(p, "index"), p.get("pid"), p.get("started")
        slot = {"host": text_field(p, "host"), "address": text_field(p, "address"), "seen": time.monotonic(),
                "dead": False,
                "pid": pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else 0,
                "started": started if isinstance(started, str) else None, "network": network_field(p),
                "hostname": p.get("hostname") if isinstance(p.get("hostname"), str) else None}
        with self._cond:
            if self.slots.register(index, slot) is not None:
                self._ranks.pop(index, None)  # the old process's rank is gone with it
            self._cond.notify_all()
            return {"stop": self._stopping}

    def _status(self, p):
        index = _int(p, "index")
        with self._cond:
            slot = self.slots.slots.get(index)
            if slot is not None and slot["dead"] == "silent":  # it was only slow: its process and rank live
                self._say("slot %d (host %s) is heard from again" % (index, slot["host"]))
                slot["dead"] = False
            if slot is not None and not slot["dead"]:
                slot["seen"] = time.monotonic()
            self.ender.heard(p.get("ended"))
            reply = {"stop": self._stopping or slot is None or bool(slot["dead"])}
            pids = self.ender.orders_for(index)
            if pids:
                reply["end"] = pids
            return reply

    def _output(self, p):
        data, err = p.get("data"), p.get("stream") == "stderr"
        if not isinstance(data, str):
            raise BadRequest("data: expected a string")
        stream = (self._err or sys.stderr) if err else (self._out or sys.stdout)
        stream.write(data)
        stream.flush()
        return {}

    def _exit_of(self, p):  # mpirun's exit (or why it could not start), from the launcher in this process
        rc, error = p.get("rc"), p.get("error")
        if not isinstance(rc, int) or isinstance(rc, bool) or (error is not None and not isinstance(error, str)):
            raise BadRequest("rc/error: expected an integer and a string")
        lost = p.get("lost_host") if isinstance(p.get("lost_host"), str) else None
        with self._cond:
            if p.get("launch", 0) != self._launches or self._exit is not None or self._relaunch is not None:
                return {"ack": True}  # an earlier mpirun's report, or one already taken
            if error is None and rc != 0 and self._relaunchable(rc < 0 or lost):
                # mpirun died (Open MPI 5.0.11's prterun can crash in a spawn across hosts, docs/elastic.md), lost
                # a host, or its ranks died (a segfault inside ULFM's shrink): start again from the last commit.
                self._start_again("lost host %s" % lost if lost else "mpirun died of signal %d" % -rc if rc < 0
                                  else "mpirun exited with code %d while the ranks ran" % rc, lost)
            if self._relaunch is None:
                self._exit, self._launch_error = (rc, str(p.get("summary") or "")), error
            self._cond.notify_all()
        return {"ack": True}

    def _call(self, p):
        after, slot = _int(p, "after"), _int(p, "rank")
        pid, started = p.get("pid"), p.get("started")
        with self._cond:
            self._asked.add(slot)
            known = self.slots.slots.get(slot)
            if known is not None and known["host"] == self.slots.local_host and isinstance(pid, int) and \
                    not isinstance(pid, bool) and pid > 0 and isinstance(started, str):
                self._ranks[slot] = [pid, started]  # a rank on this host: _check sees it die
            reply = self._wait_for_call(after)
            if reply is not None:
                return reply
            pending = sorted(q for q in self._calls if q > after)
            if not pending:  # a rank spawned after the call it asks about ended: the newest one
                return {"wait": True}
            return {"seq": pending[0], "fn": self._calls[pending[0]]}

    def _result(self, p):
        slot, seq, ok, value = _int(p, "rank"), _int(p, "seq"), p.get("ok"), p.get("value")
        if not isinstance(ok, bool) or not isinstance(value, str):
            raise BadRequest("ok/value: expected a boolean and a string")
        with self._cond:
            if seq in self._calls:
                self._results.setdefault(seq, {})[slot] = (ok, value)
                self._cond.notify_all()
        return {}

    def _gone(self, p):  # a rank's watchdog saw its slot's process die (the rank kills itself next)
        index, pid, started = _int(p, "slot"), p.get("pid"), p.get("started")
        with self._cond:
            if self.slots.gone(index, pid if isinstance(pid, int) else None, started if isinstance(started, str)
                              else None):
                self._ranks.pop(index, None)
            self._cond.notify_all()
        return {}

    def _report(self, p):  # ray_logger.log from a rank
        info = p.get("info")
        if not isinstance(info, dict):
            raise BadRequest("info: expected an object")
        if self._on_report is not None:
            self._reports.put(info)
        return {}

    def _job_env(self, _p):  # what mpirun forwards (-x) to the first ranks, for ranks spawned on other hosts
        env = os.environ if self._env is None else self._env
        secrets = (launch_env.SLOT_SECRET, launch_env.ELASTIC_SECRET)
        return {"env": {k: env[k] for k in forwarded(env) if k not in secrets}}

    def _where(self, p):  # the slot agent: a host added after mpirun started
        with self._cond:
            address = self.slots.address_of(text_field(p, "host"))
        if address is None:
            raise BadRequest("host %r is not one of this job's hosts" % p.get("host"))
        return {"address": address}

    # -- the driver's API --

    def _check(self):  # under the lock
        if self._launch_error is not None:
            raise LaunchError(self._launch_error, "the driver")
        now = time.monotonic()
        for index, slot in list(self.slots.slots.items()):
            if not slot["dead"] and now - slot["seen"] > SLOT_SILENCE:
                # Not offered for growth until heard from again; its rank stays a member: a rank that died is
                # seen by the survivors (a reset) or, on this host, below.
                self._say("slot %d (host %s) silent for %d s" % (index, slot["host"], SLOT_SILENCE))
                slot["dead"] = "silent"
        for index, (pid, started) in list(self._ranks.items()):
            if index in self.slots.members and not alive(pid, started):
                self._say("the rank of slot %d (pid %d) died" % (index, pid))
                self.slots.members.discard(index)
                del self._ranks[index]

    def wait_ready(self, timeout, alive=None, want=None, settle=10.0):
        """Waits until num_proc slots registered, then starts mpirun on them; with `want`, also waits (at most
        `settle` s more) for the slots the scheduler is starting, so that the job starts on all of them (up to
        max_np) instead of growing onto them at its first commit.

        Args:
            timeout: seconds for num_proc slots to register.
            alive: callable raising when the scheduler can no longer start slots, or None.
            want: callable returning how many slots the scheduler has started, or None.
            settle: seconds to wait for them after num_proc registered.

        Raises:
            TimeoutError: too few slots within `timeout` seconds.
        """
        check_seconds("timeout", timeout)

        def expired():
            return TimeoutError("%s: only %d of %d slots started within %g s" % (
                self.who, len(self.slots.live()), self.num_proc, timeout))
        self._wait(lambda: len(self.slots.live()) >= self.num_proc, time.monotonic() + timeout, alive, expired)
        if want is not None:
            cap = self.max_np or float("inf")
            try:
                self._wait(lambda: len(self.slots.live()) >= min(want(), cap), time.monotonic() + settle, alive,
                           lambda: TimeoutError())
            except TimeoutError:
                pass  # start on those there: the others join at the first commit
        with self._cond:
            live = self.slots.live()
            count = self.num_proc if want is None else max(self.num_proc, min(len(live), self.max_np or len(live)))
            spec = self._spec(live[:count], timeout)
        self._launched_at, self._start_timeout = time.monotonic(), max(timeout, 10)
        self._launch_thread = threading.Thread(target=self._run_launcher, args=(spec,), daemon=True,
                                               name="tfring-elastic-mpirun")
        self._launch_thread.start()

    def _spec(self, indexes, timeout, restart=False, first=None):  # under the lock
        hosts, ranks = self.slots.placement(indexes, first)
        self.slots.members, self.slots.order = set(ranks), list(ranks)
        python = self._executable or sys.executable
        env = {k: v for k, v in (os.environ if self._env is None else self._env).items()
               if not k.startswith(launch_env.ELASTIC)}
        env.update({
            launch_env.ELASTIC: "1", launch_env.ELASTIC_DRIVER: self._elastic.address,
            launch_env.ELASTIC_SECRET: self.secret, launch_env.ELASTIC_MIN_NP: str(self.min_np),
            launch_env.ELASTIC_MAX_NP: str(self.max_np or 0), launch_env.ELASTIC_TIMEOUT: str(int(self._timeout)),
            launch_env.ELASTIC_RESET_LIMIT: str(-1 if self._reset_limit is None else self._reset_limit),
            launch_env.ELASTIC_COMMAND: json.dumps([python, os.path.join(HERE, "rank.py")]),
            launch_env.SLOT_ASSIGN: json.dumps(self.slots.assignment(ranks)),
            # Slots may come from other hosts at any time: commits go to disk, for a relaunch to resume from.
            launch_env.ELASTIC_STATE_DIR: self._state_dir, launch_env.ELASTIC_DISCOVERY: "1"})
        if restart:
            env[launch_env.ELASTIC_RESTART] = "1"
        # The ranks' start and exit reports name their launch: a late one of the launch before is not counted.
        env[launch_env.ELASTIC_LAUNCH] = str(self._launches + 1)
        self.book.exits.clear(self._launches + 1)
        networks = [self.slots.slots[i]["network"] for i in indexes]
        return {"np": len(ranks), "hosts": hosts, "networks": sorted(set(networks)) if all(networks) else None,
                "env": env, "args": self._launch_args, "executable": python, "start_timeout": max(int(timeout), 10),
                "ulfm": True, "mpirun": ["--oversubscribe"], "launch": self._launches}

    def call(self, fn, args=(), kwargs=None, alive=None, timeout=None):
        """Runs fn(*args, **kwargs) on every rank (an elastic function: tfring.*.elastic.run); returns the values of
        the ranks that finished the job, in their final rank order.

        Raises:
            RankError: a rank raised (the error did not come from a lost rank: hvd.elastic.run handles those).
            LaunchError: mpirun could not be started.
            RuntimeError: mpirun ended before the ranks answered, or no rank is left.
            TimeoutError: not done within `timeout` seconds.
        """
        check_seconds("timeout", timeout, none=True)
        if self._launched_at is None:
            raise RuntimeError("%s: call() before wait_ready(): the job has not started" % self.who)
        payload = encode((ranked, (fn, tuple(args), dict(kwargs or {})), {}))
        with self._cond:
            if self._broken:
                raise RuntimeError("%s: the job cannot run more calls after a failed one" % self.who)
            seq = self._post_call(payload)
        state = {}

        def answered():  # under the lock
            got = self._results.get(seq, {})
            failed = sorted(s for s, (ok, _) in got.items() if not ok)
            if failed or (self.slots.members and self.slots.members <= set(got)):
                state["failed"] = failed
                return True
            if not got and not self._asked and time.monotonic() - self._launched_at > self._start_timeout:
                self._broken = True
                raise TimeoutError("%s: no rank started within %g s of the launch (mpirun's output above says why)"
                                   % (self.who, self._start_timeout))
            if self._exit is not None:
                self._broken = True
                raise RuntimeError("%s: mpirun exited with code %d before the ranks answered%s" % (
                    self.who, self._exit[0], ": " + self._exit[1] if self._exit[1] else ""))
            return False

        def expired():
            self._broken = True
            return TimeoutError("%s: the job did not finish within %g s" % (self.who, timeout))
        self._wait(answered, time.monotonic() + timeout if timeout else float("inf"), alive, expired)
        with self._cond:
            got = self._results.pop(seq, {})
            del self._calls[seq]
        if state["failed"]:
            self._broken = True
            slot = state["failed"][0]
            found = NOTE_RE.search(got[slot][1])
            raise RankError(int(found.group(1)) if found else -1, got[slot][1], self.who)
        values = sorted((decode(v) for ok, v in got.values()), key=lambda rv: (rv[0] is None, rv[0] or 0))
        return [value for _, value in values]

    def stop(self, timeout=15.0):
        """Tells the ranks and slots to stop; waits (at most `timeout` s) for mpirun's exit."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            while self._launch_thread is not None and self._exit is None and time.monotonic() < deadline:
                self._cond.wait(0.5)
            return self._exit is not None

    def close(self):
        """Ends mpirun if it still runs, and both services."""
        self._closed.set()
        if self._launch_thread is not None:
            self._launch_thread.join(15)
        self._server.stop()
        self._elastic.stop()
        self._reports.put(None)
        shutil.rmtree(self._state_dir, ignore_errors=True)

