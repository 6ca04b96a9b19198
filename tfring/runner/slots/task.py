"""The slot launcher's slot side: what a Spark task or a Ray actor runs so that tfring's ranks run inside it.

`serve_slot(driver, secret, index)` starts this slot's task service (exec_service.py: HMAC-authenticated, bound to
the interface on the route to the driver), registers with the driver (job.SlotJob) and then polls it every second
until told to stop. Slot 0 runs mpirun when the driver hands it the job (launcher.py); the first slot of every
other host runs the PRRTE daemon that the slot agent (agent.py) asks for. Every process started here is a child of
the calling thread, in its own session, and is killed when the slot returns (or, on Linux, when its process dies)."""
import os
import signal
import socket
import time

from tfring.common.signed_channel import DriverClient, ProtocolError
from tfring.runner.processes import descendants, start_time
from tfring.runner.slots.exec_service import ExecService
from tfring.runner.slots.launcher import Launcher
from tfring.runner.slots.net import host_identity, interface_network, route_address
from tfring.runner.slots.wire import SERVICE

POLL = 1.0  # seconds between status polls
DRIVER_SILENCE = 30.0  # seconds the driver may be unreachable before the slot gives up


def _status(index, launcher, ended):
    # Slot 0 acknowledges the launch spec and repeats mpirun's exit (or launch failure) until the driver has it.
    payload = {"index": index}
    if ended:
        payload["ended"] = ended  # [[pid, whether it was ended]] for the driver's last "end" orders
    if launcher is not None:
        payload["launched"] = True
        if launcher.report is not None and not launcher.acked.is_set():
            payload["exit"] = launcher.report
    return payload


def _heard(reply, launcher):
    if launcher is not None and reply.get("exit_ack") and launcher.report is not None:
        launcher.acked.set()


def end_ranks(pids):
    """The elastic driver's "end" order: SIGKILLs each rank that stopped responding where no live rank shares its
    host, if it is a process below this slot (the ranks of this host's daemon, which this slot runs): an order
    cannot end anything else. Returns [[pid, whether it was ended]]."""
    if not pids:
        return []
    mine = set(descendants(os.getpid()))
    done = []
    for pid in pids if isinstance(pids, list) else []:
        ok = isinstance(pid, int) and pid in mine
        if ok:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                ok = False
        done.append([pid, ok])
    return done


def serve_slot(driver, secret, index, host_id=None, bind_host=None, stop=None, log=None):
    """Serves one slot of a tfring job until the driver says stop; every process started here ends with it.

    A Ray actor acts as a slot by calling this (in a thread that lives as long as the job) with the driver's
    address and secret; a Spark task calls it from the barrier stage (tfring.spark).

    Args:
        driver: the driver service's "host:port" (job.SlotJob.address).
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
    client = DriverClient(driver, secret, timeout=10.0, name=SERVICE)
    service = ExecService(bind_host or route_address(client.host), secret, log).start()
    launcher, heard, ended = None, time.monotonic(), []
    try:
        reply = None
        while reply is None:
            try:
                reply = client.call("/register", {"index": index, "host": host_id or host_identity(index),
                                                  "address": service.address, "pid": os.getpid(),
                                                  "network": interface_network(service.address.rsplit(":", 1)[0]),
                                                  "started": start_time(os.getpid()),
                                                  "hostname": socket.gethostname()})
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
                reply = client.call("/status", _status(index, launcher, ended))
                heard, ended = time.monotonic(), end_ranks(reply.get("end"))
                _heard(reply, launcher)
            except ProtocolError as e:
                if time.monotonic() - heard > DRIVER_SILENCE:
                    raise RuntimeError("tfring slot %d: driver unreachable for %d s: %s" % (
                        index, DRIVER_SILENCE, e)) from None
                reply = {}
                continue
            if reply.get("launch") and launcher is None:  # repeated until acknowledged: start it once
                launcher = Launcher(client, reply["launch"], secret)
        # Let mpirun and the daemons end on their own first (the ranks were told to stop as well): killing a
        # daemon first would make mpirun report a lost host. The polls go on: they tell the driver this slot lives
        # and carry mpirun's exit until the driver acknowledges it.
        deadline, quick = time.monotonic() + 10, DriverClient(driver, secret, timeout=2.0, name=SERVICE)
        # Until mpirun's exit is reported and acknowledged (or the deadline).
        while ((launcher is not None and not launcher.acked.is_set()) or service.running()) and \
                time.monotonic() < deadline:
            service.spawn_pending(0.2)
            if time.monotonic() >= last + POLL:
                last = time.monotonic()
                try:
                    _heard(quick.call("/status", _status(index, launcher, [])), launcher)
                except ProtocolError:
                    pass
        return launcher.rc if launcher is not None else None
    finally:
        if launcher is not None:
            launcher.stop()
        service.stop()
