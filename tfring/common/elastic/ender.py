"""The core's silent hook (census.h): ranks stopped responding past the stall deadline (a frozen process, a frozen
machine, a cut link) and this rank asks the launcher to go on without them. The launcher is the arbiter: it says
yes unless this rank was itself declared silent first, so when a link is cut the side that cannot reach it (or
reaches it late) ends itself instead of going on as a second job. The lowest answering rank also asks it to end the
silent ranks no live rank shares a host with (a rank on the same host SIGKILLs its silent neighbour itself); the
launcher checks the process is this job's and kills it. Each rank then declares them failed to MPI and the
survivors recover as after a kill (docs/elastic.md)."""
import sys
import threading

from tfring.common import library
from tfring.common.elastic import membership, protocol
from tfring.common.signed_channel import Unreachable

_hook = []  # the ctypes callback, kept alive as long as the core may call it
SILENT_TIMEOUT = 5.0  # seconds the launcher has to answer (within the core's 10 s grace): a rank cut off ends


def _say(message):
    sys.stderr.write("tfring.elastic: %s\n" % message)
    sys.stderr.flush()


def _end(client, rank, host, pid):
    try:
        message = client.call(protocol.END, protocol.end_request(rank, host, pid)).get("message", "")
    except Exception as e:  # noqa: BLE001 - reported; declared failed all the same
        message = "cannot ask the launcher: %s" % e
    _say("ending rank %d (host %s, pid %d) through the launcher: %s" % (rank, host, pid, message))


def _silent(*args):
    try:
        return _decide(*args)
    except Exception as e:  # noqa: BLE001 - a ctypes callback must not raise; undecided: no declaration, no exit
        _say("cannot decide about the silent ranks: %r" % (e,))
        return -1


def _decide(rank, host, pid, n, ranks, hosts, pids, alone, ask):
    silent = [(ranks[i], hosts[i].decode("utf-8", "replace"), pids[i]) for i in range(n)]
    me = (rank, host.decode("utf-8", "replace"), pid)
    client = membership.client()
    if client is None or len(silent) > protocol.MAX_SILENT:
        return -1
    client.timeout = SILENT_TIMEOUT
    try:
        reply = client.call(protocol.SILENT, protocol.silent_request(me, silent))
    except Unreachable as e:  # this rank cannot reach the launcher: it is the one cut off
        _say("rank %d cannot reach the launcher (%s) while the ranks it waits for are silent: ending" % (rank, e))
        return 0
    except Exception as e:  # noqa: BLE001 - an answer, but not a verdict (an older launcher, a refused request)
        _say("rank %d: the launcher did not decide about the silent ranks (%s)" % (rank, e))
        return -1
    if not reply.get("ok"):
        _say("rank %d must not go on: %s" % (rank, reply.get("message", "")))
        return 0
    if ask:  # the launcher may take a while (ssh to an unreachable host): the declaration does not wait for it
        for i, (r, h, p) in enumerate(silent):
            if alone[i]:
                threading.Thread(target=_end, args=(client, r, h, p), daemon=True).start()
    return 1


def install(core):
    """Sets the core's silent hook to ask this job's launcher (once per process; elastic jobs only)."""
    if not _hook:
        _hook.append(library.SILENT_HOOK(_silent))
        core.tfring_set_silent_hook(_hook[0])
