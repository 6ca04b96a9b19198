"""One rank freezes (SIGSTOP: alive, silent) after a few steps; every other rank must fail within the stall deadline
with an error naming it, and the job must end. Each live rank prints FAILED <rank> <seconds> <message>."""
import os
import signal
import sys
import time

import torch

import tfring.torch as hvd

FROZEN = int(sys.argv[1])
hvd.init()
r, n = hvd.rank(), hvd.size()
for step in range(5):
    out = hvd.allreduce(torch.full((4,), float(r + 1)), op=hvd.Sum, name="step_%d" % step)
    assert out.tolist() == [n * (n + 1) / 2] * 4, out
if r == FROZEN:
    print("FROZEN %d" % r, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(600)  # never reached: the job ends while this rank is stopped
time.sleep(0.5)  # the frozen rank is stopped by now
start = time.time()
try:
    hvd.allreduce(torch.ones(4), name="after_freeze")
    print("NO-ERROR %d" % r, flush=True)
except Exception as e:  # noqa: BLE001 (the test reads the message)
    print("FAILED %d %.1f %s: %s" % (r, time.time() - start, type(e).__name__, e), flush=True)
    sys.exit(3)
