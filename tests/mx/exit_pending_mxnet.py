"""Run under mpirun by test_mxnet_ranks.py: a script that ends with tfring collectives still queued in MXNet's
engine. tfring shuts down at interpreter exit; the collectives must complete first, on every rank.

    python exit_pending_mxnet.py MODE
    MODE: ok        end normally, results never read
          raise     end with an uncaught exception (exit code 1)
          slow_peer rank 0 reaches its end first; the others submit the same collectives 2 s later and read them
          failing   the pending collective fails (ranks disagree on its shape): reported in one line at exit
          stalled   each rank leaves a collective no other rank submits: it fails after the stall shutdown time

A handler registered before init runs after tfring's own atexit shutdown and prints what the pending
collectives left in their outputs ("rank R at exit: ..."), or why reading them failed.
"""
import atexit
import sys
import time

import mxnet as mx

import tfring.mxnet as hvd

MODE = sys.argv[1]
outputs = {}


def report():
    for key in sorted(outputs):
        try:
            value = outputs[key].asnumpy().ravel()[0]
            print("rank %d at exit: %s=%g" % (rank, key, value), flush=True)
        except Exception as e:  # noqa: BLE001 (what the test looks for)
            print("rank %d at exit: %s failed: %s" % (rank, key, str(e).strip().splitlines()[-1]), flush=True)


atexit.register(report)  # before init: runs after tfring's atexit handlers
hvd.init()
rank, size = hvd.rank(), hvd.size()

if MODE == "failing":
    outputs["mismatch"] = hvd.allreduce(mx.nd.ones((rank + 1,)), name="exit.mismatch")
    print("rank %d: end of script" % rank, flush=True)
    sys.exit(0)
if MODE == "stalled":
    outputs["stalled"] = hvd.allreduce(mx.nd.ones((2,)), name="exit.only_rank_%d" % rank)
    print("rank %d: end of script" % rank, flush=True)
    sys.exit(0)

if MODE == "slow_peer" and rank != 0:
    time.sleep(2)  # rank 0 reaches its exit first, its collectives still pending (waiting for these ranks)
w = mx.nd.ones((2000, 2000)) * (rank + 1)
w.wait_to_read()
# Pending reads of w (about a second of engine work): the in-place allreduce is queued behind them, so it has not
# reached tfring's core when the script ends.
products = [mx.nd.dot(w, w) for _ in range(2)]
outputs["inplace"] = hvd.allreduce_(w, op=hvd.Sum, name="exit.inplace")
outputs["summed"] = hvd.allreduce(mx.nd.full((1000,), rank + 1.0), op=hvd.Sum, name="exit.summed")
if MODE == "slow_peer" and rank != 0:
    print("rank %d read summed=%g" % (rank, outputs["summed"].asnumpy()[0]), flush=True)
if MODE == "raise":
    raise RuntimeError("user error at the end of rank %d" % rank)
print("rank %d: end of script" % rank, flush=True)
