"""Who is in an elastic job, and how that changes (rank side). tfring runs on `base_comm()`; after a worker
failure the survivors shrink it (ULFM: `MPI_Comm_shrink`, no process restarted), when the launcher reports new
slots they spawn processes onto them (`MPI_Comm_spawn` + `Intercomm_merge`), and tfring's runtime is started
again on the new communicator (process sets, response cache, host split and background thread all rebuilt by
`tfring.init`). MPI is only used here while tfring's background thread is stopped."""
import faulthandler
import json
import os
import sys
import threading
import time

from tfring.common import basics, launch_env
from tfring.common.elastic import membership, protocol
from tfring.common.elastic.membership import base_comm, host_name, min_np, reset_limit, timeout

_lock = threading.Lock()
_resets = 0
_pending = None  # rank 0: the launcher's latest growth proposal [[host, n], ...]
_pending_since = 0.0  # proposals from requests started before this time are stale (a reset happened)
_agreed = None  # the growth every rank agreed on in check_host_updates
_poller = None
_drivers = {}  # rank 0: the launcher's address for each host offered for growth (as the launcher names it)


_plans = {}  # rank 0: what the launcher said about each growth offer ("assign", "forward"), by offer


def _learn(reply):
    _drivers.update(reply.get("drivers") or {})
    with _lock:
        key = json.dumps(reply.get("add"))
        _plans.pop(key, None)
        _plans[key] = {"assign": reply.get("assign") or {}, "forward": reply.get("forward") or []}
        while len(_plans) > 16:  # offers change as slots come and go; a reset clears them all
            del _plans[next(iter(_plans))]


def _plan_of(add):
    """Rank 0: the launcher's word on the offer `add` (one snapshot per reset): {"assign": {host: {"new": whether
    the job has no daemon there yet, "slots": [[slot index, pid, start time], ...] the new processes take (Spark/Ray)}},
    "forward": [environment variables the new processes are given]}."""
    with _lock:
        return dict(_plans.get(json.dumps(add)) or {"assign": {}, "forward": []})


def rank_is_root():
    return basics.rank() == 0


def _poll():
    global _pending
    client = membership.client()
    while client is not None:
        started = time.time()
        try:
            reply = client.call(protocol.HOSTS, protocol.hosts_request(0))
            add = reply.get("add") or None
            _learn(reply)
        except Exception as e:  # the launcher may be gone at the end of the job; growth just stops
            sys.stderr.write("tfring.elastic: cannot reach the launcher for host updates: %s\n" % e)
            add = None
            time.sleep(4)
        with _lock:
            if started >= _pending_since:
                _pending = add
        time.sleep(1.0)


def pending_growth():
    """Rank 0: the slots the launcher offers now, [[host, n], ...] or None (starts the poller on first use)."""
    global _poller
    if not membership.enabled():
        return None
    with _lock:
        if _poller is None:
            _poller = threading.Thread(target=_poll, name="tfring-elastic-hosts", daemon=True)
            _poller.start()
        return _pending


def set_agreed_growth(add):
    global _agreed
    _agreed = add


def _forget_proposals():
    global _pending, _pending_since
    with _lock:
        _pending, _pending_since = None, time.time()
        _plans.clear()


class _Deadline:
    """Every blocking MPI step of a reset has a deadline: past it the process says what hung and exits
    (an MPI call cannot be interrupted any other way)."""

    def __init__(self, what, seconds):
        # At least a minute: --elastic-timeout 0 (no wait for slots) must not end a reset that is under way.
        self.what, self.seconds = what, max(seconds, 60)

    def expire(self):
        """Says what hung and where every thread was, then ends the process (exit status 1)."""
        try:
            sys.stderr.write("tfring.elastic: %s did not finish within %d s (--elastic-timeout); exiting. Where "
                             "each thread was:\n" % (self.what, self.seconds))
            sys.stderr.flush()
            faulthandler.dump_traceback(file=2, all_threads=True)  # fd 2: sys.stderr may have been replaced
        finally:
            os._exit(1)  # whatever the report did: the process must not go on waiting

    def __enter__(self):
        self.timer = threading.Timer(self.seconds, self.expire)
        self.timer.daemon = True
        self.timer.start()

    def __exit__(self, *exc):
        self.timer.cancel()


def _command():
    value = os.environ.get(launch_env.ELASTIC_COMMAND)
    return json.loads(value) if value else [sys.executable] + sys.argv


def _spawn(comm, add, plan=None):
    """Collective over comm: starts n processes on each host of `add` ([[host, n], ...]; one command per host,
    MPI_Comm_spawn_multiple) and merges them in (highest ranks). `plan` (rank 0: _plan_of(add)) is the launcher's
    word on each host, the same for every launcher: whether it is new to the job, which slots its processes take
    (each told only its host's, so none takes another host's slot), and what environment they are given."""
    from mpi4py import MPI
    command = _command()
    plan = plan or {"assign": {}, "forward": []}
    env = ["%s=%s" % (k, os.environ[k]) for k in plan["forward"] if k in os.environ]
    drivers = {h: _drivers[h] for h, _ in add if h in _drivers}
    if drivers:  # the address this process uses may not be reachable from a newly added host
        env.append("%s=%s" % (launch_env.ELASTIC_DRIVERS, json.dumps(drivers)))
    infos, commands = [], []
    for host, n in add:
        info = MPI.Info.Create()
        info.Set("host", "%s:%d" % (host, n))
        mine = plan["assign"].get(host)
        if mine is None or mine.get("new", True):
            # A host outside the allocation gets a daemon (harmless for a known one, except under the slot
            # launcher's names: Open MPI then fails the spawn now and then; the driver says which are new).
            info.Set("PMIX_ADD_HOST", info.Get("host"))
        infos.append(info)
        told = ["%s=%s" % (launch_env.SLOT_ASSIGN, json.dumps({host: mine}))] if mine and mine.get("slots") else []
        commands.append(["/usr/bin/env"] + env + told + command if env or told else command)
    try:
        with _Deadline("starting %s on %s" % (command[0], add), timeout()):
            inter = comm.Spawn_multiple([c[0] for c in commands], args=[c[1:] for c in commands],
                                        maxprocs=[n for _, n in add], info=infos, root=0)
            merged = inter.Merge(high=False)
    finally:
        for info in infos:
            info.Free()
    return merged


def _report(comm, reason, add=(), plan=None):
    """Rank 0 tells the launcher where the ranks are now (it keeps host occupancy and failure counts): the ranks
    of `comm` (collective over it), then the processes about to be spawned there (`add`, [[host, n], ...]; they
    take the highest ranks and cannot take part in this gather)."""
    # Each rank's host, and in a Spark/Ray elastic job its slot index.
    pairs = comm.gather((host_name(), os.environ.get(launch_env.SLOT_INDEX)), root=0)
    if comm.rank == 0:
        hosts = [h for h, _ in pairs] + [h for h, n in add for _ in range(n)]
        slots = [int(s) for _, s in pairs if s is not None] + [
            e[0] for h, _ in add for e in ((plan or {}).get("assign") or {}).get(h, {}).get("slots", [])]
        client = membership.client()
        if client is not None:
            try:
                client.call(protocol.RESET, protocol.reset_request(hosts, slots, reason))
            except Exception as e:
                sys.stderr.write("tfring.elastic: cannot report the reset to the launcher: %s\n" % e)


def _log(message):
    sys.stderr.write("tfring.elastic: %s\n" % message)
    client = membership.client()
    if client is not None:
        try:
            client.call(protocol.LOG, protocol.log_request(message))
        except Exception:
            pass


def _wait_for_slots(comm, need):
    """Below --min-np: rank 0 asks the launcher for slots until `need` more are offered or the timeout."""
    deadline = time.time() + timeout()
    client = membership.client()
    add = None
    while comm.rank == 0 and client is not None and time.time() < deadline:
        try:
            reply = client.call(protocol.HOSTS, protocol.hosts_request(0))
            offered = reply.get("add") or []
            _learn(reply)
        except Exception:
            offered = []
        if sum(n for _, n in offered) >= need:
            add = offered
            break
        time.sleep(1.0)
    with _Deadline("waiting for --min-np slots", timeout() + 60):
        return comm.bcast(add, root=0)


def _learn_failures(comm, seconds=3.0):
    """Waits (progressing MPI, at most `seconds`) until this rank itself knows a process failed. A rank that only
    saw the revocation may learn of the failure from its TCP connection to the dead peer *during* MPIX_Comm_shrink,
    and Open MPI 5.0.11 then crashes marking the half-built communicator (SIGSEGV in ompi_comm_revoke_local, seen
    1 run in 20 of tests/hosts/test_multihost_elastic_slots.py); once known, a late notice is ignored
    (ompi_errhandler_proc_failed_internal). Measured: the ranks knew already in 6 of 6 traced resets."""
    from mpi4py import MPI
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        failed = comm.Get_failed()
        known = failed.Get_size()
        failed.Free()
        if known:
            return
        MPI.COMM_SELF.Iprobe()  # opal_progress: the TCP connection's error is read here
        time.sleep(0.005)


def reset(failure):
    """Rebuilds the job after a worker failure (shrink) or for agreed new hosts (spawn), then restarts tfring on
    the new communicator. Every rank of the job calls it at the same point.

    Args:
        failure: True after `HorovodInternalError`, False after `HostsUpdatedInterrupt`.

    Raises:
        RuntimeError: --reset-limit reached, or fewer than --min-np ranks left and no slots came in time.
    """
    global _resets, _agreed
    _resets += 1
    membership.count(resets=1)
    if failure:  # from here on this rank leaves without MPI_Finalize, which can hang after a process failure
        membership.failed = True
    limit = reset_limit()
    if limit >= 0 and _resets > limit:
        raise RuntimeError("tfring.elastic: the job was reset %d times (--reset-limit %d); ending it"
                           % (_resets, limit))
    started = time.time()
    old_size = basics.size() if basics.is_initialized() else None
    basics.shutdown()  # the background thread stops (it already has after a failure); MPI is ours now
    comm = base_comm()
    if failure:
        _learn_failures(comm)
        with _Deadline("shrinking the communicator", timeout()):
            comm = comm.Shrink()
        lost = (old_size or comm.size) - comm.size
        membership.count(ranks_lost=lost)
        _report(comm, "failure")
        reason = "failure"
        if comm.size < min_np():
            if comm.rank == 0:
                _log("%d rank(s) left, %d remain, below --min-np %d: waiting up to %d s for new slots"
                     % (lost, comm.size, min_np(), timeout()))
            add = _wait_for_slots(comm, min_np() - comm.size)
            if not add:
                message = ("%d worker(s) failed and %d remain, fewer than --min-np %d; no new slots within %d s "
                           "(--elastic-timeout): ending the job" % (lost, comm.size, min_np(), timeout()))
                if comm.rank == 0:
                    _log(message)
                raise RuntimeError("tfring.elastic: " + message)
            plan = _plan_of(add) if comm.rank == 0 else None
            _report(comm, "grow", add, plan)
            comm, reason = _spawn(comm, add, plan), "grow"
            membership.count(ranks_added=sum(n for _, n in add))
    else:
        add, _agreed = _agreed, None
        plan = _plan_of(add) if comm.rank == 0 else None
        _report(comm, "grow", add, plan)
        comm, reason = _spawn(comm, add, plan), "grow"
        membership.count(ranks_added=sum(n for _, n in add))
    membership.set_base(comm)
    _forget_proposals()
    with _Deadline("starting tfring on the new communicator", timeout()):
        basics.init(comm=comm)
    if basics.rank() == 0:
        sys.stderr.write("tfring.elastic: reset (%s): %s -> %d ranks in %.2f s\n"
                         % (reason, old_size, basics.size(), time.time() - started))
