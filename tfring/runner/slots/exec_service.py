"""A slot's task service: runs a command for an authenticated /spawn and relays its output, stdin and exit; the
slot agent (agent.py) is the other end, standing in for ssh so that PRRTE's daemon on a host is a child of that
host's first slot."""
import base64
import os
import queue
import subprocess
import threading
import time

from tfring.common import launch_env
from tfring.common.signed_channel import BadRequest
from tfring.common.signed_server import DriverServer
from tfring.runner.processes import die_with_parent, terminate
from tfring.runner.slots.wire import TASK_SERVICE
from tfring.runner.stale_sessions import remove_stale

SPAWN_WAIT = 10.0


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
    (tfring.runner.slots.agent is the other end). Requests wait for `spawn_pending`, which the slot's own thread
    calls, to start the process: the child is then that thread's (Linux kills it if the slot's process dies).

    Args:
        bind_host: the address to listen on (never a wildcard).
        secret: the job's secret.
        log: where refused requests are logged (default sys.stderr).
    """

    def __init__(self, bind_host, secret, log=None):
        self._secret = secret
        self._children, self._pending, self._lock = {}, queue.Queue(), threading.Lock()
        self._server = DriverServer(bind_host, secret, {
            "/spawn": self._spawn, "/poll": self._poll, "/kill": self._kill, "/stdin": self._stdin},
            log=log, name=TASK_SERVICE)

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
            # The job's secret by name in the daemon's environment (never on a command line), as mpirun has it: the
            # processes an elastic job spawns on this host later inherit the daemon's environment, not mpirun's.
            env = dict(os.environ, **{launch_env.SLOT_SECRET: self._secret, launch_env.ELASTIC_SECRET: self._secret})
            remove_stale(env)  # the daemon's session directory: see tfring.runner.stale_sessions
            proc = subprocess.Popen(["/bin/sh", "-c", request["command"]], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                    preexec_fn=die_with_parent, env=env)
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
