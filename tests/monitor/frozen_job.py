"""One rank freezes (SIGSTOP: alive, silent); every other rank must fail within the stall deadline naming it, and the
job must end. `frozen_job.py R`: rank R stops between collectives (the others then wait in the negotiation) and each
live rank prints FAILED <rank> <seconds> <message>. `frozen_job.py R data`: rank R stops *inside* a large allreduce
(the others then wait in MPI, in the data transfer); run with --min-np the job is elastic, and the survivors go on
and print DONE <rank> <size> <value> after redoing the allreduce without it."""
import os
import signal
import sys
import threading
import time
import types

import torch

import tfring.torch as hvd

FROZEN = int(sys.argv[1])
DATA = sys.argv[2:] == ["data"]
# 96 Mi floats (384 MiB): the transfer lasts well over the 0.3 s after which the frozen rank stops (np=3, 2 cores).
# Made before init: under load, filling it took some ranks over the 3 s stall deadline after the others had
# reached the "ready" allreduce (a CI failure), which then failed as a stall before anything froze.
BIG = torch.ones(96 << 20) if DATA else None
hvd.init()


def freeze_soon(delay):
    print("FROZEN %d" % hvd.rank(), flush=True)
    threading.Timer(delay, os.kill, (os.getpid(), signal.SIGSTOP)).start()


def negotiation_freeze():
    r, n = hvd.rank(), hvd.size()
    for step in range(5):
        out = hvd.allreduce(torch.full((4,), float(r + 1)), op=hvd.Sum, name="step_%d" % step)
        assert out.tolist() == [n * (n + 1) / 2] * 4, out
    if r == FROZEN:
        freeze_soon(0)
        time.sleep(600)  # never reached: the job ends while this rank is stopped
    time.sleep(0.5)  # the frozen rank is stopped by now
    start = time.time()
    try:
        hvd.allreduce(torch.ones(4), name="after_freeze")
        print("NO-ERROR %d" % r, flush=True)
    except Exception as e:  # noqa: BLE001 (the test reads the message)
        print("FAILED %d %.1f %s: %s" % (r, time.time() - start, type(e).__name__, e), flush=True)
        sys.exit(3)


def data_freeze(state):
    hvd.allreduce(torch.ones(1), name="ready")  # every rank submits the big one within milliseconds of the others
    if state.frozen and hvd.rank() == FROZEN:
        freeze_soon(0.3)  # by then the negotiation (ms) is over and every rank is inside the transfer
    start = time.time()
    out = hvd.allreduce(BIG, op=hvd.Sum, name="big")  # (out of place: BIG stays ones for a redo)
    state.frozen = False
    print("DONE %d %d %.1f %.1f" % (hvd.rank(), hvd.size(), out[0].item(), time.time() - start), flush=True)


if not DATA:
    negotiation_freeze()
elif os.environ.get("TFRING_ELASTIC") == "1":
    state = hvd.elastic.ObjectState(frozen=True)
    hvd.elastic.run(data_freeze)(state)
else:
    data_freeze(types.SimpleNamespace(frozen=True))
