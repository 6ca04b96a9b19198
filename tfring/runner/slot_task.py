"""The slot launcher's slot side: what a Spark task or a Ray actor runs so that tfring's ranks run inside it.

`serve_slot(driver, secret, index)` starts this slot's task service (HMAC-authenticated, bound to the interface
on the route to the driver), registers with the driver (tfring.runner.slots.SlotJob) and then polls it every
second until told to stop. Slot 0 runs mpirun when the driver hands it the job; the first slot of every other
host runs the PRRTE daemon that tfring.runner.slot_agent asks for. Every process started here is a child of the
calling thread, in its own session, and is killed when the slot returns (or, on Linux, when its process dies)."""
import base64
import ctypes
import fcntl
import ipaddress
import json
import os
import queue
import shlex
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from tfring.common.signed_channel import BadRequest, DriverClient, DriverServer, ProtocolError
from tfring.runner import slots
from tfring.runner.launch import descendants, kill_session, parse, plan
from tfring.runner.output import Relay, failure_summary

POLL = 1.0  # seconds between status polls
DRIVER_SILENCE = 30.0  # seconds the driver may be unreachable before the slot gives up
SPAWN_WAIT = 10.0
HERE = os.path.dirname(os.path.abspath(__file__))


def route_address(host):
    """This machine's address on the route to `host` (a UDP connect sends nothing).

    Args:
        host: an address or host name.

    Returns:
        str: the local address (127.0.0.1 when `host` is a loopback address).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), 9))
        return s.getsockname()[0]


def interface_network(address):
    """The network of the interface that holds an address, for Open MPI's *_if_include (which must match on every
    host: one subnet for all hosts, not each host's own address).

    Args:
        address: a local IPv4 address.

    Returns:
        str: e.g. "10.0.0.0/24"; address + "/32" when no interface has it as its primary address.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                if socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, request)[20:24]) != address:  # SIOCGIFADDR
                    continue
                mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x891B, request)[20:24])  # SIOCGIFNETMASK
            except OSError:
                continue
            return str(ipaddress.ip_interface("%s/%s" % (address, mask)).network)
    return address + "/32"


def host_identity(index=0):
    """What tells hosts apart: slots with the same identity share one PRRTE host (and its daemon).

    Args:
        index: the slot's index, for $TFRING_SLOT_HOST_ID's "{index}".

    Returns:
        str: $TFRING_SLOT_HOST_ID when set (tests: "h{index}" makes every slot a host of its own), else the host
        name plus the boot id (two containers can share a name).
    """
    if os.environ.get("TFRING_SLOT_HOST_ID"):
        return os.environ["TFRING_SLOT_HOST_ID"].replace("{index}", str(index))
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return "%s/%s" % (socket.gethostname(), boot)


try:  # resolved before any fork: the child only calls it
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent():
    # Linux: SIGTERM when the thread that forked us ends (so spawn only from the slot's own long-lived thread).
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def terminate(proc, grace=3.0):
    """SIGTERM to a process's session, SIGKILL to it and whatever it left after `grace` seconds.

    Args:
        proc: a subprocess.Popen started with start_new_session=True.
        grace: seconds between the two signals.
    """
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    for pid in descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    kill_session(proc.pid)
    try:
        proc.kill()
        proc.wait(5)
    except (OSError, subprocess.TimeoutExpired):
        pass


class _Child:
    """A process the task service started, with what it printed that no poll has taken yet."""

    def __init__(self, proc):
        self.proc, self.out, self.err = proc, bytearray(), bytearray()
        self.cond = threading.Condition()
        self.readers = [threading.Thread(target=self._read, args=(proc.stdout, self.out), daemon=True),
                        threading.Thread(target=self._read, args=(proc.stderr, self.err), daemon=True)]
        for t in self.readers:
            t.start()

    def _read(self, stream, buf):
        fd = stream.fileno()
        while True:
            chunk = os.read(fd, 65536)
            with self.cond:
                buf += chunk
                self.cond.notify_all()
            if not chunk:
                return


class ExecService:
    """A slot's task service: runs a command for an authenticated /spawn and relays its output, stdin and exit
    (tfring.runner.slot_agent is the other end). Requests wait for `spawn_pending`, which the slot's own thread
    calls, to start the process: the child is then that thread's (Linux kills it if the slot's process dies).

    Args:
        bind_host: the address to listen on (never a wildcard).
        secret: the job's secret.
        log: where refused requests are logged (default sys.stderr).
    """

    def __init__(self, bind_host, secret, log=None):
        self._children, self._pending, self._lock = {}, queue.Queue(), threading.Lock()
        self._server = DriverServer(bind_host, secret, {
            "/spawn": self._spawn, "/poll": self._poll, "/kill": self._kill, "/stdin": self._stdin},
            log=log, name=slots.TASK_SERVICE)

    @property
    def address(self):
        """Where the agent reaches the service.

        Returns:
            str: "host:port".
        """
        return self._server.address

    def start(self):
        """Starts serving.

        Returns:
            ExecService: self.
        """
        self._server.start()
        return self

    def _spawn(self, p):
        command = p.get("command")
        if not isinstance(command, str) or not command.strip():
            raise BadRequest("command: expected a non-empty string")
        request = {"command": command, "done": threading.Event()}
        self._pending.put(request)
        if not request["done"].wait(SPAWN_WAIT):
            return {"error": "the slot did not start the command within %g s" % SPAWN_WAIT}
        return {"id": request["id"]} if "id" in request else {"error": request["error"]}

    def spawn_pending(self, timeout):
        """Starts the commands requested so far, in this thread; waits at most `timeout` s for one.

        Args:
            timeout: seconds.
        """
        try:
            request = self._pending.get(timeout=timeout)
        except queue.Empty:
            return
        try:
            # The remote shell of ssh: the agent's words joined, run by sh (PRRTE writes sh syntax).
            proc = subprocess.Popen(["/bin/sh", "-c", request["command"]], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                    preexec_fn=_die_with_parent)
            with self._lock:
                request["id"] = len(self._children) + 1
                self._children[request["id"]] = _Child(proc)
        except OSError as e:
            request["error"] = "cannot start the command: %s" % e
        request["done"].set()

    def _child(self, p):
        with self._lock:
            child = self._children.get(p.get("id"))
        if child is None:
            raise BadRequest("id: no such process")
        return child

    def _poll(self, p):
        child = self._child(p)
        wait = min(float(p.get("wait", 1.0)) if isinstance(p.get("wait"), (int, float)) else 1.0, 5.0)
        deadline = time.monotonic() + wait
        with child.cond:
            while not child.out and not child.err and child.proc.poll() is None and time.monotonic() < deadline:
                child.cond.wait(0.2)
            rc = child.proc.poll()
            if rc is not None:  # exited: whatever it printed last comes with the exit code
                for t in child.readers:
                    child.cond.release()
                    t.join(2)
                    child.cond.acquire()
            out, err = bytes(child.out), bytes(child.err)
            del child.out[:], child.err[:]
        return {"out": base64.b64encode(out).decode(), "err": base64.b64encode(err).decode(), "rc": rc}

    def _kill(self, p):
        child = self._child(p)
        threading.Thread(target=terminate, args=(child.proc,), daemon=True).start()
        return {}

    def _stdin(self, p):
        child = self._child(p)
        try:
            if p.get("data"):
                child.proc.stdin.write(base64.b64decode(p["data"]))
                child.proc.stdin.flush()
            if p.get("eof"):
                child.proc.stdin.close()
        except (OSError, ValueError, TypeError):
            pass  # the process is gone or closed its stdin, as with a broken ssh pipe
        return {}

    def running(self):
        """Whether a process it started is still running.

        Returns:
            bool
        """
        with self._lock:
            return any(c.proc.poll() is None for c in self._children.values())

    def stop(self):
        """Stops serving and ends every process it started."""
        self._server.stop()
        with self._lock:
            children = list(self._children.values())
        for child in children:
            terminate(child.proc)


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
    """Slot 0's mpirun for the job the driver handed over; reports its exit (code and failure summary) to the
    driver. Constructed in the slot's own thread (mpirun is that thread's child).

    Args:
        client: the DriverClient of the slot.
        spec: the driver's launch spec (SlotJob._launch_spec).
        secret: the job's secret (put in mpirun's environment, forwarded by name).
    """

    def __init__(self, client, spec, secret):
        self.client, self.rc = client, None
        env = dict(os.environ if spec.get("env") is None else spec["env"])
        env.update({slots.DRIVER_ENV: client.address, slots.SECRET_ENV: secret,
                    slots.HOSTS_ENV: json.dumps({h: a for h, _, a in spec["hosts"][1:]}),
                    slots.MAP_ENV: json.dumps(spec.get("slots") or [])})
        python = spec.get("executable") or sys.executable
        hosts = ",".join("%s:%d" % (h, n) for h, n, _ in spec["hosts"])
        argv = ["-np", str(spec["np"]), "-H", hosts, "--start-timeout", str(spec["start_timeout"])] + \
            list(spec.get("args") or []) + ["--", python, os.path.join(HERE, "slot_rank.py")]
        args = parse(argv)
        cmd, env = plan(args, env)
        extra = []
        if len(spec["hosts"]) > 1:
            # The other hosts' daemons: started by the agent through their slot's task service, each a child of
            # that slot (no tree spawn: only this slot knows the hosts; attached: no --daemonize, which would
            # detach the daemon from the slot).
            extra += ["--prtemca", "plm_ssh_agent", "%s %s" % (python, os.path.join(HERE, "slot_agent.py")),
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
        self.cmd = cmd[:1] + extra + cmd[1:]
        self.relay = Relay()
        self.relay.expected, self.np, self.start_timeout = args.num_ranks, args.num_ranks, args.start_deadline
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        self.out, self.err = _Forward(client, "stdout"), _Forward(client, "stderr")
        if args.verbose:
            self.err.write("tfring: %s\n" % " ".join(shlex.quote(c) for c in self.cmd))
        self.late = []
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self):
        pumps = [threading.Thread(target=self.relay.pump, args=(self.proc.stdout, self.out), daemon=True),
                 threading.Thread(target=self.relay.pump, args=(self.proc.stderr, self.err), daemon=True)]
        for t in pumps:
            t.start()
        if self.start_timeout and not self.relay.all_started.wait(self.start_timeout) and self.proc.poll() is None:
            self.late = sorted(set(range(self.np)) - self.relay.started)
            terminate(self.proc)
        rc = self.proc.wait()
        for t in pumps:
            t.join(5)
        self.relay.close()
        self.out.close()
        self.err.close()
        if self.late:
            summary = "ranks %s did not start within %d s" % (",".join(map(str, self.late)), self.start_timeout)
        else:
            summary = failure_summary(rc, self.relay.untagged) if rc else ""
        self.rc = rc
        try:
            self.client.call("/exit", {"rc": rc, "summary": summary})
        except ProtocolError:
            pass

    def stop(self):
        """Ends mpirun and every rank (SIGTERM, SIGKILL after a grace period)."""
        terminate(self.proc, grace=5.0)


def serve_slot(driver, secret, index, host_id=None, bind_host=None, stop=None, log=None):
    """Serves one slot of a tfring job until the driver says stop; every process started here ends with it.

    A Ray actor acts as a slot by calling this (in a thread that lives as long as the job) with the driver's
    address and secret; a Spark task calls it from the barrier stage (tfring.spark).

    Args:
        driver: the driver service's "host:port" (SlotJob.address).
        secret: the job's secret.
        index: this slot's index in [0, num_slots); slot 0 launches mpirun.
        host_id: what identifies this slot's host (default `host_identity()`).
        bind_host: the task service's address (default: this machine's address on the route to the driver).
        stop: a threading.Event that ends the slot early, or None.
        log: where refused requests are logged (default sys.stderr).

    Returns:
        int: mpirun's exit code on slot 0 (None when it never ran), None on other slots.

    Raises:
        RuntimeError: the driver could not be reached for DRIVER_SILENCE seconds, or refused this slot.
    """
    client = DriverClient(driver, secret, timeout=10.0, name=slots.SERVICE)
    service = ExecService(bind_host or route_address(client.host), secret, log).start()
    launcher, heard = None, time.monotonic()
    try:
        reply = None
        while reply is None:
            try:
                reply = client.call("/register", {"index": index, "host": host_id or host_identity(index),
                                                  "address": service.address, "pid": os.getpid(),
                                                  "network": interface_network(service.address.rsplit(":", 1)[0]),
                                                  "started": slots.start_time(os.getpid())})
            except ProtocolError as e:
                if time.monotonic() - heard > DRIVER_SILENCE:
                    raise RuntimeError("tfring slot %d: cannot register: %s" % (index, e)) from None
                time.sleep(POLL)
        heard = last = time.monotonic()
        while not reply.get("stop") and not (stop is not None and stop.is_set()):
            service.spawn_pending(max(0.0, last + POLL - time.monotonic()))
            if time.monotonic() < last + POLL:
                continue
            last = time.monotonic()
            try:
                reply = client.call("/status", {"index": index})
                heard = time.monotonic()
            except ProtocolError as e:
                if time.monotonic() - heard > DRIVER_SILENCE:
                    raise RuntimeError("tfring slot %d: driver unreachable for %d s: %s" % (
                        index, DRIVER_SILENCE, e)) from None
                reply = {}
                continue
            if reply.get("launch") and launcher is None:
                launcher = Launcher(client, reply["launch"], secret)
        # Let mpirun and the daemons end on their own first (the ranks were told to stop as well): killing a
        # daemon first would make mpirun report a lost host. The polls go on: they tell the driver this slot lives.
        deadline, quick = time.monotonic() + 10, DriverClient(driver, secret, timeout=2.0, name=slots.SERVICE)
        while ((launcher is not None and launcher.proc.poll() is None) or service.running()) and \
                time.monotonic() < deadline:
            service.spawn_pending(0.2)
            if time.monotonic() >= last + POLL:
                last = time.monotonic()
                try:
                    quick.call("/status", {"index": index})
                except ProtocolError:
                    pass
        return launcher.rc if launcher is not None else None
    finally:
        if launcher is not None:
            launcher.stop()
        service.stop()
