"""A rank of a slot job (tfring.runner.slots.job): fetches calls from the driver service, runs them and posts each
result (or traceback) back, until the driver says stop. Persistent ranks serve any number of calls (Ray); Spark's
run() makes one. The function arrives pickled in a signed message: it is unpickled only after the signature check
(tfring.common.signed_channel verifies every reply).

Every rank also watches its own slot (the process it belongs to) and dies with it: a rank is a descendant of its
host's first slot (slot 0 runs mpirun, the first slot of another host the PRRTE daemon), not of the other slots of
its host, which would otherwise leave it running when they die."""
import json
import os
import signal
import sys
import threading
import time
import traceback

SILENCE = 60.0  # seconds the driver may be unreachable before the rank exits
WATCH_PERIOD = 0.5  # seconds between two looks at the slot's process


def _lineage(pid):
    """[(pid, start time), ...] from `pid` up to (not including) init, nearest first."""
    from tfring.runner.processes import parent, start_time
    chain = []
    while pid > 1 and len(chain) < 64:
        ppid = parent(pid)
        if ppid is None:
            break
        chain.append((pid, start_time(pid)))
        pid = ppid
    return chain


def _ancestors(pid):
    return set(_lineage(pid))


def find_slot(slot_map, local_rank, pid=None):
    """The slot this rank belongs to: its host is the one whose first slot is an ancestor of the rank, and on a
    host the ranks take the slots in local rank order (mpirun places them so).

    Args:
        slot_map: [[[slot index, pid, start time], ...] per host] ($TFRING_SLOT_MAP).
        local_rank: this rank's local rank.
        pid: the rank's pid (default this process's).

    Returns:
        list: [slot index, pid, start time] of the slot, or None when no host's first slot is an ancestor.
    """
    ancestors = _ancestors(pid or os.getpid())
    for members in slot_map:
        if members and (members[0][1], members[0][2]) in ancestors and local_rank < len(members):
            return members[local_rank]
    return None


def assigned_slot(assign, local_rank, pid=None):
    """An elastic slot job's rank: its slot from {mpirun host name: {"anchor": [pid, start time], "slots":
    [[index, pid, start time], ...] in local rank order}}. The host is the one whose anchor (mpirun's process, or
    the slot running the host's daemon) is this process's nearest ancestor; a spawned process is told its own host
    only.

    Returns:
        list: [index, pid, start time], or None when no host's anchor is an ancestor or no slot has this local rank.
    """
    hosts = list(assign.values())
    if len(hosts) != 1:
        # The nearest anchor: a slot process may itself descend from the driver (Spark's local mode, tests).
        anchors = {tuple(h["anchor"]): h for h in hosts if h.get("anchor")}
        hosts = next(([anchors[p]] for p in _lineage(pid or os.getpid()) if p in anchors), [])
    entries = hosts[0]["slots"] if len(hosts) == 1 else None
    return entries[local_rank] if entries and 0 <= local_rank < len(entries) else None


def watch(rank, slot, client=None, log=sys.stderr):
    """Kills this process (SIGKILL) when its slot's process dies; mpirun then ends the job. Runs in a thread.

    Args:
        rank: this process's world rank.
        slot: [slot index, pid, start time], from `find_slot`.
        client: a DriverClient to tell the driver which slot died (its error then names it), or None.
        log: where the reason is written.
    """
    from tfring.common.signed_channel import ProtocolError
    from tfring.runner.processes import alive
    index, pid, started = slot
    while alive(pid, started):
        time.sleep(WATCH_PERIOD)
    log.write("tfring rank %d: exits: its slot %d (pid %d) died\n" % (rank, index, pid))
    log.flush()
    if client is not None:
        try:
            # The slot's process identity too: the scheduler may already have restarted the slot (a new process under
            # the same index), which must not be taken for the dead one.
            client.call("/gone", {"rank": rank, "slot": index, "pid": pid, "started": started})
        except ProtocolError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def serve(client, rank, log=sys.stderr, slot=None):
    """Runs the driver's calls until it says stop.

    Args:
        client: a DriverClient of the driver service.
        rank: this process's world rank.
        log: where a lost driver is reported.
        slot: the index of this rank's slot, told to the driver with the first request (or None).

    Returns:
        int: the exit code (0 when told to stop, 1 when the driver was lost).
    """
    from tfring.common.signed_channel import ProtocolError
    from tfring.runner.processes import start_time
    from tfring.runner.slots.wire import decode, encode
    seq, heard = 0, time.monotonic()
    me = {"pid": os.getpid(), "started": start_time(os.getpid())}  # the elastic driver watches local ranks by it
    while True:
        try:
            reply = client.call("/call", dict(me, rank=rank, after=seq, slot=slot))
            heard = time.monotonic()
        except ProtocolError as e:
            if time.monotonic() - heard > SILENCE:
                log.write("tfring rank %d: driver lost: %s\n" % (rank, e))
                return 1
            time.sleep(1.0)
            continue
        if reply.get("stop"):
            return 0
        if "seq" not in reply:
            continue  # nothing yet: ask again
        seq = reply["seq"]
        try:
            fn, args, kwargs = decode(reply["fn"])
            ok, value = True, encode(fn(*args, **kwargs))  # a result may be a lambda or a closure
        except BaseException:  # reported to the caller with the traceback (SystemExit and Ctrl-C included)
            ok, value = False, traceback.format_exc()
        heard = time.monotonic()
        while True:
            try:
                client.call("/result", {"rank": rank, "seq": seq, "ok": ok, "value": value})
                break
            except ProtocolError as e:
                if time.monotonic() - heard > SILENCE:
                    log.write("tfring rank %d: cannot report call %d: %s\n" % (rank, seq, e))
                    return 1
                time.sleep(1.0)


def main():
    from tfring.common import launch_env
    from tfring.common.signed_channel import DriverClient
    from tfring.runner.processes import die_with_parent
    from tfring.runner.slots.wire import MAX_BODY, SERVICE
    # Killed with its parent (mpirun or the PRRTE daemon): PRRTE starts every rank in a session of its own, so a
    # daemon that dies abruptly (its slot's process was killed, taking the output pipes with it) would otherwise
    # leave the ranks running, orphaned, whatever they were doing.
    if die_with_parent(signal.SIGKILL):
        os._exit(1)  # the parent died before the call
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    assign = os.environ.get(launch_env.SLOT_ASSIGN)
    if assign:
        # An elastic slot job: the driver assigned every rank its slot, and ranks are renumbered by resets, so the
        # slot's index is this rank's name towards the driver.
        slot = assigned_slot(json.loads(assign), int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
        if slot is None:
            sys.stderr.write("tfring rank %d: no slot assigned to local rank %s in %s (this process's ancestors: "
                             "%s)\n" % (rank, os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"), assign,
                                         _lineage(os.getpid())))
            return 1
        rank = slot[0]
    else:
        slot = find_slot(json.loads(os.environ.get(launch_env.SLOT_MAP) or "[]"),
                         int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
    driver, secret = os.environ[launch_env.SLOT_DRIVER], os.environ[launch_env.SLOT_SECRET]
    if slot is None:
        sys.stderr.write("tfring rank %d: cannot tell which slot it belongs to: it will not end with it\n" % rank)
    else:
        os.environ[launch_env.SLOT_INDEX] = str(slot[0])
        quick = DriverClient(driver, secret, timeout=2.0, name=SERVICE)
        threading.Thread(target=watch, args=(rank, slot, quick), name="tfring-slot-watchdog", daemon=True).start()
    client = DriverClient(driver, secret, timeout=30.0, name=SERVICE, max_body=MAX_BODY)
    if assign:
        _job_environment(client)
    return serve(client, rank, slot=None if slot is None else slot[0])


def _job_environment(client):
    """An elastic slot job's rank takes the job's environment from the driver: a process spawned on another host
    started with that host's daemon's environment (mpirun's -x reaches the first ranks only)."""
    from tfring.common.signed_channel import ProtocolError
    try:
        env = client.call("/env", {}).get("env") or {}
    except ProtocolError as e:
        sys.stderr.write("tfring rank: cannot fetch the job's environment: %s\n" % e)
        return
    # The slot and elastic settings this process was given are its own (its slot); the rest is the job's.
    env = {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)
           and not k.startswith(("TFRING_SLOT_", "TFRING_ELASTIC"))}
    os.environ.update(env)
    sys.path += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]


if __name__ == "__main__":
    # Run as a script: drop this file's directory (tfring/runner/slots) from sys.path so `tfring` resolves normally.
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    from tfring.common import library as _lib
    _lib.prepare_mpi_environment()
    sys.exit(main())
