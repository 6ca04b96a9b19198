"""PRRTE's ssh agent in a slot job (`--prtemca plm_ssh_agent "python agent.py"`): called like ssh as
`agent.py [ssh options] HOST COMMAND...`, it asks HOST's task service (exec_service.ExecService, found in
$TFRING_SLOT_HOSTS) to run COMMAND, the PRRTE daemon, and relays its stdin, stdout, stderr and exit code, so the
daemon and its ranks are children of that host's slot. SIGTERM/SIGINT/SIGHUP kill the remote command. The secret
comes from $TFRING_SLOT_SECRET; a task service that stays unreachable for 30 s is a lost host (exit 255, as ssh)."""
import base64
import json
import os
import signal
import sys
import threading
import time

# ssh options that take a value (PRRTE may pass plm_ssh_args through); the rest are flags.
_WITH_VALUE = set("bcDEeFIiJLlmOopQRSWw")
SILENCE = 30.0


def split_argv(argv):
    """ssh-style arguments -> (host, command string).

    Args:
        argv: the arguments after the program name.

    Returns:
        tuple: (host, the command's words joined by spaces, as ssh sends them).

    Raises:
        ValueError: no host or no command.
    """
    i = 0
    while i < len(argv) and argv[i].startswith("-") and len(argv[i]) > 1:
        i += 2 if argv[i][-1] in _WITH_VALUE and len(argv[i]) == 2 else 1
    if i + 1 >= len(argv):
        raise ValueError("usage: agent.py [ssh options] HOST COMMAND...")
    return argv[i], " ".join(argv[i + 1:])


def main(argv):
    from tfring.common import launch_env
    from tfring.common.signed_channel import DriverClient, ProtocolError
    from tfring.runner.processes import die_with_parent
    from tfring.runner.slots.wire import TASK_SERVICE
    try:
        host, command = split_argv(argv)
        address = json.loads(os.environ.get(launch_env.SLOT_HOSTS) or "{}").get(host)
        if not address and os.environ.get(launch_env.SLOT_DRIVER):  # a host an elastic job added after the start
            from tfring.runner.slots.wire import SERVICE
            driver = DriverClient(os.environ[launch_env.SLOT_DRIVER], os.environ[launch_env.SLOT_SECRET],
                                  timeout=10.0, name=SERVICE)
            try:
                address = driver.call("/where", {"host": host}).get("address")
            except ProtocolError:
                address = None
        if not address:
            raise ValueError("host %r is not one of this job's slots (%s)" % (host, launch_env.SLOT_HOSTS))
        client = DriverClient(address, os.environ[launch_env.SLOT_SECRET], timeout=10.0, name=TASK_SERVICE)
        reply = client.call("/spawn", {"command": command})
    except (ValueError, KeyError, ProtocolError) as e:
        sys.stderr.write("tfring slot agent: %s\n" % e)
        return 255
    if "id" not in reply:
        sys.stderr.write("tfring slot agent: %s: %s\n" % (host, reply.get("error")))
        return 255
    pid, stopped = reply["id"], []

    def stop(signum, _frame):
        stopped.append(signum)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, stop)
    # mpirun gone (e.g. after losing this host): no point polling a dead host for 30 s; stop() handles SIGTERM.
    if die_with_parent(signal.SIGTERM):
        os.kill(os.getpid(), signal.SIGTERM)

    def pump_stdin():
        try:
            while True:
                data = os.read(0, 65536)
                client.call("/stdin", {"id": pid, "data": base64.b64encode(data).decode(), "eof": not data})
                if not data:
                    return
        except (OSError, ProtocolError):
            pass
    threading.Thread(target=pump_stdin, daemon=True).start()
    heard = time.monotonic()
    while True:
        if stopped:
            try:
                client.call("/kill", {"id": pid})
            except ProtocolError:
                pass
            return 128 + stopped[0]
        try:
            reply = client.call("/poll", {"id": pid, "wait": 1.0})
            heard = time.monotonic()
        except ProtocolError as e:
            if time.monotonic() - heard > SILENCE:
                sys.stderr.write("tfring slot agent: lost %s: %s\n" % (host, e))
                return 255
            time.sleep(0.5)
            continue
        for key, fd in (("out", 1), ("err", 2)):
            data = base64.b64decode(reply.get(key) or "")
            while data:
                data = data[os.write(fd, data):]
        if reply.get("rc") is not None:
            rc = reply["rc"]
            return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    # Run as a script: drop this file's directory (tfring/runner/slots) from sys.path so `tfring` resolves normally.
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    sys.exit(main(sys.argv[1:]))
