"""An elastic Keras job for tests/elastic/test_keras_elastic.py: trains a small model with KerasState and the elastic
callbacks; ELASTIC_KILL="rank:step" makes that (original) rank SIGKILL itself after finishing that step;
ELASTIC_GROW="path=text" makes rank 0 (of the original ranks) rewrite the discovery file at step
$ELASTIC_GROW_AT (default 3); ELASTIC_COMMIT_EVERY=N (default 1) is
CommitStateCallback's batches_per_commit; ELASTIC_STEP_SLEEP=s slows each step (with ELASTIC_GROW: from
ELASTIC_GROW_AT until the job grew). With TF_USE_LEGACY_KERAS=1 the model, optimizer and callbacks are
tf_keras's (Keras 2), else Keras 3's on KERAS_BACKEND (tensorflow, jax or torch).
Every rank appends one JSON line per finished step to $ELASTIC_OUT/steps.<pid>.jsonl and one per commit (the
step count it saved) to $ELASTIC_OUT/commits.<pid>.jsonl, and writes its final weights to
$ELASTIC_OUT/final.<pid>.npz."""
import hashlib
import json
import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

import tfring.keras as hvd

if os.environ.get("TF_USE_LEGACY_KERAS", "0").lower() in ("1", "true"):
    import tf_keras as keras
else:
    import keras

EPOCHS, STEPS, BATCH = 3, 8, 16
OUT = os.environ["ELASTIC_OUT"]
KILL = os.environ.get("ELASTIC_KILL", "")
GROW = os.environ.get("ELASTIC_GROW", "")  # "path=text": rank 0 writes the discovery file at step GROW_AT
GROW_AT = int(os.environ.get("ELASTIC_GROW_AT", "3"))
COMMIT_EVERY = int(os.environ.get("ELASTIC_COMMIT_EVERY", "1"))

# Started by the running job when it grew. Asked before init(): the newcomer disconnects from its parents there.
SPAWNED = MPI.Comm.Get_parent() != MPI.COMM_NULL
hvd.init()
FIRST_RANK, FIRST_SIZE = hvd.rank(), hvd.size()
keras.utils.set_random_seed(1)
rng = np.random.RandomState(0)
# Enough rows for every epoch in full on up to 4 ranks: fit() keeps one pass over the data across epochs and ends
# the training early ("ran out of data") when a shard has fewer than EPOCHS * STEPS batches.
x_all = rng.randn(EPOCHS * STEPS * BATCH * 4, 8).astype("float32")
y_all = (x_all @ rng.randn(8, 1)).astype("float32")

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
# ELASTIC_SHARDED=1 or 2: Adam (stage 1) or Nadam (stage 2: its build() also makes a plain variable) with the state
# sharded, cut again at every size the job takes.
SHARDED = int(os.environ.get("ELASTIC_SHARDED", "0"))
INNER = keras.optimizers.SGD if not SHARDED else keras.optimizers.Adam if SHARDED == 1 else keras.optimizers.Nadam
optimizer = hvd.DistributedOptimizer(INNER(0.01), sharded=SHARDED) if SHARDED else \
    hvd.DistributedOptimizer(INNER(0.01))
model.compile(optimizer=optimizer, loss="mse")
FLAVOUR = keras.__name__ if keras.__name__ == "tf_keras" else keras.backend.backend()


def current_step():
    """The optimizer's step count; on JAX the trainer's state is written back into the variables first."""
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()
    return int(keras.ops.convert_to_numpy(optimizer.iterations)) if FLAVOUR != "tf_keras" else \
        int(optimizer.iterations.numpy())


def digest(values):
    return hashlib.sha1(b"".join(np.ascontiguousarray(v).tobytes() for v in values)).hexdigest()


steps_log = open(os.path.join(OUT, "steps.%d.jsonl" % os.getpid()), "a")
commits_log = open(os.path.join(OUT, "commits.%d.jsonl" % os.getpid()), "a")


SLEEP = float(os.environ.get("ELASTIC_STEP_SLEEP", "0"))  # slows steps so a host can be added mid-run


def slowed(step):
    """With ELASTIC_GROW, only the steps from GROW_AT until the job grew are slowed (the others need no time)."""
    if not GROW:
        return True
    grown = bool(resets) and resets[-1] > min([FIRST_SIZE] + resets[:-1])
    return step >= GROW_AT and not SPAWNED and not grown


class Record(keras.callbacks.Callback):
    """Logs each finished step (before the commit, which may interrupt the batch end for a growth)."""

    def on_train_batch_end(self, batch, logs=None):
        step = current_step()
        if slowed(step):
            time.sleep(SLEEP)
        steps_log.write(json.dumps({"t": time.time(), "step": step, "rank": hvd.rank(), "size": hvd.size(),
                                    "first_rank": FIRST_RANK, "spawned": SPAWNED}) + "\n")
        steps_log.flush()
        # "More slots" appear mid-run; rank 0 now (after a failure, it may not be the first rank 0).
        if GROW and hvd.rank() == 0 and not SPAWNED and step == GROW_AT:
            path, content = GROW.split("=", 1)
            with open(path, "w") as f:
                f.write(content + "\n")


class Kill(keras.callbacks.Callback):
    """After step `at` (and its commit, if it is a commit point): the victim dies; the survivors roll back to the
    last commit."""

    def on_train_batch_end(self, batch, logs=None):
        step = current_step()
        if KILL:
            rank, at = map(int, KILL.split(":"))
            if FIRST_RANK == rank and step == at and not SPAWNED:
                with open(os.path.join(OUT, "killed.json"), "w") as f:
                    json.dump({"t": time.time(), "step": step}, f)
                os.kill(os.getpid(), signal.SIGKILL)


class LoggedKerasState(hvd.elastic.KerasState):
    """KerasState that logs the step count of every commit (`save()` is what `commit()` keeps)."""

    def save(self):
        super().save()
        row = {"t": time.time(), "step": current_step(), "rank": hvd.rank(), "size": hvd.size(),
               "first_rank": FIRST_RANK}
        if SHARDED and self._optimizer_values is not None:  # the commit's whole optimizer state
            row["optimizer"] = digest(v for v in self._optimizer_values if np.ndim(v))  # (slots: checked whole)
            row["scalars"] = sorted(float(v) for v in self._optimizer_values if not np.ndim(v))
        commits_log.write(json.dumps(row) + "\n")
        commits_log.flush()


state = LoggedKerasState(model, optimizer, epoch=0, batch=0)
resets = []


def scale_learning_rate():
    """As Horovod's examples do in a reset callback, a new learning rate (here one a rank that joins cannot have
    seen: lower after every reset). Every rank, a newcomer too, must train with it: sync() must not put back the
    commit's."""
    optimizer.learning_rate = 0.01 / (1 + len(resets))


def learning_rate():
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate)) if FLAVOUR != "tf_keras" else \
        float(keras.backend.get_value(optimizer.learning_rate))


state.register_reset_callbacks([lambda: resets.append(hvd.size()), scale_learning_rate])


class CheckSharded(keras.callbacks.Callback):
    """ELASTIC_SHARDED: at the start of every fit (every rank at once, the newcomer too), the optimizer's whole
    state as the job holds it now (gathered from the shards: a collective) and this rank's shard size."""

    def on_train_begin(self, logs=None):
        if SHARDED:
            log = open(os.path.join(OUT, "sharded.%d.jsonl" % os.getpid()), "a")
            inner = optimizer.inner_optimizer
            slots = sum(int(v.shape[0]) for v in inner.variables if len(v.shape) == 1)  # flat shards, not scalars
            values = optimizer.sharded_state()
            log.write(json.dumps({"step": current_step(), "size": hvd.size(), "spawned": SPAWNED, "slots": slots,
                                  "optimizer": digest(v for v in values if np.ndim(v)),
                                  "scalars": sorted(float(v) for v in values if not np.ndim(v)),
                                  "learning_rate": learning_rate()}) + "\n")
            log.close()


@hvd.elastic.run
def train(state):
    x, y = x_all[hvd.rank()::hvd.size()], y_all[hvd.rank()::hvd.size()]
    callbacks = [CheckSharded(), Record(), hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=COMMIT_EVERY), Kill()]
    model.fit(x, y, batch_size=BATCH, steps_per_epoch=STEPS, epochs=EPOCHS - state.epoch, verbose=0, shuffle=False,
              callbacks=callbacks)


train(state)
np.savez(os.path.join(OUT, "final.%d.npz" % os.getpid()), *[np.asarray(v.numpy()) for v in model.variables],
         rank=hvd.rank(), size=hvd.size(), epoch=state.epoch, learning_rate=learning_rate(), step=current_step(),
         resets=np.array(resets), joined=SPAWNED, keras=FLAVOUR, optimizer=type(optimizer).__name__)
print("rank %d of %d done: epoch %d step %d resets %s" % (hvd.rank(), hvd.size(), state.epoch, current_step(),
                                                          resets))
sys.stdout.flush()
