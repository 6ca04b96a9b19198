"""Rank 0 trains one step of a Keras model through tfring's Keras DistributedOptimizer while rank 1 does not:
it either sleeps (busy outside tfring) or submits an allreduce of its own ("--other"). The stall inspector
(TFRING_STALL_CHECK_TIME_SECONDS / TFRING_STALL_SHUTDOWN_TIME_SECONDS from the test) must report which layer's
gradient waits and what rank 1 waits on; each rank prints DONE <exception type> when its call fails."""
import argparse
import time

import keras
import numpy as np
from mpi4py import MPI

import tfring.keras as hvd

p = argparse.ArgumentParser()
p.add_argument("--other", action="store_true")
p.add_argument("--eager", action="store_true")
args = p.parse_args()

hvd.init()
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, name="hidden"), keras.layers.Dense(2, name="head")])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse", run_eagerly=args.eager)
x, y = np.ones((4, 8), np.float32), np.ones((4, 2), np.float32)
try:
    if hvd.rank() == 0:
        model.fit(x, y, epochs=1, verbose=0)
    elif args.other:
        hvd.allreduce(np.ones(3, np.float32), name="rank1_metric")
    else:
        time.sleep(8)
        raise RuntimeError("rank 1 slept through the stall")
except Exception as e:  # noqa: BLE001 (the test reads the type)
    print("DONE %s" % type(e).__name__, flush=True)
# Stay up until the other rank's call has failed too: a rank that exits at once shuts tfring down, and the other
# rank's call, whose stall began later (on a busy machine rank 0 compiles its step for seconds first), would end as
# "shut down by rank N" (AbortedError) instead of failing by its own deadline. MPI's own barrier, not tfring's,
# polled with a deadline.
request = MPI.COMM_WORLD.Ibarrier()
deadline = time.monotonic() + 120
while not request.Test():
    if time.monotonic() > deadline:
        print("the other rank never finished its call", flush=True)
        break
    time.sleep(0.05)
