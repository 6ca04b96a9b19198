"""Slot 0's mpirun: the job the driver hands over, run as a child of the slot's own thread, its output relayed to
the driver's `/output` and its exit (code and failure summary), or why it could not start, reported to `/exit`
until the driver acknowledges it (the slot also repeats the report in its status polls: task.py)."""
import json
import os
import shlex
import sys
import threading
import time

from tfring.common import launch_env
from tfring.common.signed_channel import ProtocolError
from tfring.runner.launch import parse
from tfring.runner.mpirun import in_place, plan, ulfm_args
from tfring.runner.output import Relay, failure_summary, lost_host
from tfring.runner.processes import die_with_parent, terminate
from tfring.runner.slots.net import route_address
from tfring.runner.slots.service import LOCAL_HOST
from tfring.runner.stale_sessions import remove_stale
from tfring.runner.supervise import TRANSIENT_START_FAILURE, Mpirun, failed_to_start

HERE = os.path.dirname(os.path.abspath(__file__))
EXIT_DEADLINE = 30.0  # seconds /exit is retried without an acknowledgement (the status polls still carry it)
LAUNCH_FAILED = 127  # the exit code reported when mpirun could not be started at all


class _Forward:
    """A text stream whose writes reach the driver's /output, batched every 0.2 s (mpirun's relay writes here)."""

    def __init__(self, client, stream):
        self.client, self.stream, self.buf, self.lock = client, stream, [], threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def write(self, text):
        with self.lock:
            self.buf.append(text)

    def flush(self):
        pass

    def _send(self):
        with self.lock:
            data, self.buf = "".join(self.buf), []
        if data:
            try:
                self.client.call("/output", {"stream": self.stream, "data": data})
            except ProtocolError:
                pass  # the driver went away: the slot stops on its next status poll

    def _run(self):
        while not self.done.wait(0.2):
            self._send()
        self._send()

    def close(self):
        self.done.set()
        self.thread.join(10)


class Launcher:
    """Slot 0's mpirun for the job the driver handed over; reports its exit (code and failure summary), or why it
    could not start (bad arguments, no mpirun), to the driver. Constructed in the slot's own thread (mpirun is that
    thread's child); never raises: a failed start is a report like an exit.

    Args:
        client: the DriverClient of the slot.
        spec: the driver's launch spec (service.SlotService._launch_spec).
        secret: the job's secret (put in mpirun's environment, forwarded by name).
        done: callable() -> whether every rank reported its exit (elastic: supervise.Mpirun.wait ends an mpirun
            that lingers after it, e.g. waiting for the daemon of a host cut off), or None.
    """

    def __init__(self, client, spec, secret, done=None):
        self.client, self.rc, self.proc, self.done = client, None, None, done
        self.launch = (spec or {}).get("launch", 0)  # which of the driver's launches (an old one's report is old)
        self.report = None  # {"rc", "summary"[, "error"]} once mpirun exited or failed to start
        self.acked = threading.Event()  # the driver has the report (from /exit or a status reply)
        self.closed = threading.Event()
        try:
            self._start(spec, secret)
        except (Exception, SystemExit) as e:  # argparse's usage errors are SystemExit
            self.report = {"rc": LAUNCH_FAILED, "summary": "", "error": "%s: %s" % (type(e).__name__, e),
                           "launch": self.launch}
            threading.Thread(target=self._post_exit, daemon=True).start()

    def command(self, spec, secret):
        """mpirun_command for this slot's client (a test's subclass may run another command)."""
        return mpirun_command(self.client, spec, secret)

    def _start(self, spec, secret):
        self.cmd, self.env, args = self.command(spec, secret)
        self.np, self.start_timeout = args.num_ranks, args.start_deadline
        self._spawn()
        self.out, self.err = _Forward(self.client, "stdout"), _Forward(self.client, "stderr")
        if args.verbose:
            self.err.write("tfring: %s\n" % " ".join(shlex.quote(c) for c in self.cmd))
        self.late = []
        threading.Thread(target=self._wait, daemon=True).start()

    def _spawn(self):
        remove_stale(self.env)  # see tfring.runner.stale_sessions
        self.relay = Relay()
        self.relay.expected = self.np
        # The start deadline is watched beside mpirun, so one that fails at once is seen (and retried) at once.
        self.mpirun = Mpirun(self.cmd, self.env, self.relay, self.start_timeout, self.np, preexec_fn=die_with_parent)
        self.proc = self.mpirun.proc

    def _run_once(self):
        rc = self.mpirun.wait(self.out, self.err, self.done)
        self.late = self.mpirun.late
        return rc

    def _wait(self):
        rc = self._run_once()
        # As tfringrun does (supervise.py): Open MPI 5 sometimes fails in its own start-up; no rank ran, so once more.
        if failed_to_start(rc, self.relay) and not self.closed.is_set():
            self.err.write("tfring: Open MPI failed before starting any rank (%s); starting the job again\n"
                           % TRANSIENT_START_FAILURE)
            self._spawn()
            rc = self._run_once()
        self.out.close()
        self.err.close()
        if self.late:
            summary = "ranks %s did not start within %d s" % (",".join(map(str, self.late)), self.start_timeout)
        else:
            summary = failure_summary(rc, self.relay.untagged) if rc else ""
        self.rc = rc
        self.report = {"rc": rc, "summary": summary, "lost_host": lost_host(self.relay.untagged),
                       "launch": self.launch}
        self._post_exit()

    def _post_exit(self):
        # Retried until acknowledged: a lost report would leave the driver waiting for ranks that are gone. After
        # stop() one more try: the driver may be closing.
        deadline = time.monotonic() + EXIT_DEADLINE
        while not self.acked.is_set():
            try:
                if self.client.call("/exit", self.report).get("ack"):
                    self.acked.set()
                    return
            except ProtocolError:
                pass
            if time.monotonic() > deadline or self.closed.wait(0.5):
                return

    def stop(self):
        """Ends mpirun and every rank (SIGTERM, SIGKILL after a grace period)."""
        if self.proc is not None:
            terminate(self.proc, grace=5.0)
        self.closed.set()


def mpirun_command(client, spec, secret):
    """(mpirun's command line, its environment, the tfringrun arguments as plan() completed them) for the driver's
    launch spec, `client` being the slot's DriverClient."""
    env = dict(os.environ if spec.get("env") is None else spec["env"])
    env.update({launch_env.SLOT_DRIVER: client.address, launch_env.SLOT_SECRET: secret,
                launch_env.SLOT_HOSTS: json.dumps({h: a for h, _, a in spec["hosts"] if h != LOCAL_HOST}),
                launch_env.SLOT_MAP: json.dumps(spec.get("slots") or [])})
    python = spec.get("executable") or sys.executable
    hosts = ",".join("%s:%d" % (h, n) for h, n, _ in spec["hosts"])
    argv = ["-np", str(spec["np"]), "-H", hosts, "--start-timeout", str(spec["start_timeout"])] + \
        list(spec.get("args") or []) + ["--", python, os.path.join(HERE, "rank.py")]
    args = parse(argv)
    cmd, env = plan(args, env)
    if spec.get("ulfm"):
        cmd = in_place(cmd, env)  # no PRRTE keepalive where a cut link is survived in place
    # An elastic job's ULFM (the user's --mca coll in the job's args wins, as with tfringrun) and --oversubscribe:
    # hosts may be added later.
    extra = (ulfm_args(cmd) if spec.get("ulfm") else []) + list(spec.get("mpirun") or [])
    if len(spec["hosts"]) > 1 or spec["hosts"][0][0] != LOCAL_HOST or spec.get("ulfm"):
        # The other hosts' daemons: started by the agent through their slot's task service, each a child of
        # that slot (no tree spawn: only this slot knows the hosts; attached: no --daemonize, which would
        # detach the daemon from the slot).
        extra += ["--prtemca", "plm_ssh_agent", "%s %s" % (python, os.path.join(HERE, "agent.py")),
                  "--prtemca", "plm_ssh_no_tree_spawn", "1", "--leave-session-attached"]
    if not args.nics:
        # Rank traffic on the networks of the interfaces the slots reach the driver on (shared memory within a
        # host). The daemons get the same values: each host must find its own interface in them (a list of
        # each host's address/32 breaks PRRTE's out-of-band setup), hence the networks.
        networks = spec.get("networks") or [route_address(client.host) + "/32"]
        include = ",".join(sorted(set(networks)))
        extra += ["--mca", "btl_tcp_if_include", include]
        # PRRTE 3.0 never gives a remote daemon a loopback out-of-band address: several "hosts" on one machine
        # (TFRING_SLOT_HOST_ID tests) leave PRRTE its default choice.
        if len(spec["hosts"]) > 1 and not any(n.startswith("127.") for n in networks):
            extra += ["--mca", "oob_tcp_if_include", include]
    return cmd[:1] + extra + cmd[1:], env, args
