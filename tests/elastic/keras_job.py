"""An elastic Keras job for tests/test_elastic.py: trains a small model with KerasState and the elastic
callbacks; ELASTIC_KILL="rank:step" makes that (original) rank SIGKILL itself after finishing that step;
ELASTIC_GROW="path=text" makes rank 0 rewrite the discovery file at step 3.
Every rank appends one JSON line per finished step to $ELASTIC_OUT/steps.<pid>.jsonl and writes its final
weights to $ELASTIC_OUT/final.<pid>.npz."""
import json
import os
import signal
import sys
import time

import keras
import numpy as np
from mpi4py import MPI

import tfring.keras as hvd

EPOCHS, STEPS, BATCH = 3, 8, 16
OUT = os.environ["ELASTIC_OUT"]
KILL = os.environ.get("ELASTIC_KILL", "")
GROW = os.environ.get("ELASTIC_GROW", "")  # "path=text": rank 0 writes the discovery file at step 3

hvd.init()
FIRST_RANK, FIRST_SIZE = hvd.rank(), hvd.size()
SPAWNED = MPI.Comm.Get_parent() != MPI.COMM_NULL  # started by the running job when it grew
keras.utils.set_random_seed(1)
rng = np.random.RandomState(0)
x_all = rng.randn(512, 8).astype("float32")
y_all = (x_all @ rng.randn(8, 1)).astype("float32")

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01))
model.compile(optimizer=optimizer, loss="mse")
steps_log = open(os.path.join(OUT, "steps.%d.jsonl" % os.getpid()), "a")


SLEEP = float(os.environ.get("ELASTIC_STEP_SLEEP", "0"))  # slows steps so a host can be added mid-run


class Record(keras.callbacks.Callback):
    """Logs each finished step (before the commit, which may interrupt the batch end for a growth)."""

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(SLEEP)
        step = int(optimizer.iterations.numpy())
        steps_log.write(json.dumps({"t": time.time(), "step": step, "rank": hvd.rank(), "size": hvd.size(),
                                    "first_rank": FIRST_RANK, "spawned": SPAWNED}) + "\n")
        steps_log.flush()
        if GROW and FIRST_RANK == 0 and not SPAWNED and step == 3:  # "more slots" appear mid-run
            path, content = GROW.split("=", 1)
            with open(path, "w") as f:
                f.write(content + "\n")


class Kill(keras.callbacks.Callback):
    """After the commit of step `at`: the victim dies, so the survivors roll back to exactly that step."""

    def on_train_batch_end(self, batch, logs=None):
        step = int(optimizer.iterations.numpy())
        if KILL:
            rank, at = map(int, KILL.split(":"))
            if FIRST_RANK == rank and step == at and not SPAWNED:
                with open(os.path.join(OUT, "killed.json"), "w") as f:
                    json.dump({"t": time.time(), "step": step}, f)
                os.kill(os.getpid(), signal.SIGKILL)


state = hvd.elastic.KerasState(model, optimizer, epoch=0, batch=0)
resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])


@hvd.elastic.run
def train(state):
    x, y = x_all[hvd.rank()::hvd.size()], y_all[hvd.rank()::hvd.size()]
    model.fit(x, y, batch_size=BATCH, steps_per_epoch=STEPS, epochs=EPOCHS - state.epoch, verbose=0, shuffle=False,
              callbacks=[Record(), hvd.elastic.UpdateEpochStateCallback(state),
                         hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.CommitStateCallback(state), Kill()])


train(state)
np.savez(os.path.join(OUT, "final.%d.npz" % os.getpid()), *[v.numpy() for v in model.variables],
         rank=hvd.rank(), size=hvd.size(), epoch=state.epoch, step=int(optimizer.iterations.numpy()),
         resets=np.array(resets), joined=SPAWNED)
print("rank %d of %d done: epoch %d step %d resets %s" % (hvd.rank(), hvd.size(), state.epoch,
                                                          int(optimizer.iterations.numpy()), resets))
sys.stdout.flush()
