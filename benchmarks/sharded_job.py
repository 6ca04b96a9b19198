"""One rank of benchmarks/sharded_optimizer.py: Keras fit of train_step.py's dense model (25.2 M params) with
tfring.keras.DistributedOptimizer(Adam), unsharded or sharded=1, on the backend Keras runs (KERAS_BACKEND), one
compute thread per rank. Each rank measures its peak RSS before the first step and after the last (the
optimizer's state appears at the first step), the bytes its optimizer variables hold, and its step times; rank 0
writes every rank's numbers to --out."""
import argparse
import json
import os
import resource
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--sharded", type=int, default=0)
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--out", required=True)
ARGS = parser.parse_args()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
os.environ.setdefault("OMP_NUM_THREADS", "1")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfring.keras as hvd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
hvd.init()
if keras.backend.backend() == "torch":
    import torch
    torch.set_num_threads(1)


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def build_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((1024,)), keras.layers.Dense(4096, activation="relu"),
                             keras.layers.Dense(4096, activation="relu"), keras.layers.Dense(1024, activation="relu"),
                             keras.layers.Dense(10)])


class Timer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times, self.start = [], None

    def on_train_batch_begin(self, batch, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        float(logs["loss"])  # waits for the step
        self.times.append(time.perf_counter() - self.start)


rng = np.random.RandomState(hvd.rank())
n = ARGS.steps * ARGS.batch_size
x, y = rng.rand(n, 1024).astype("float32"), rng.randint(0, 10, n)
model = build_model()
opt = hvd.DistributedOptimizer(keras.optimizers.Adam(1e-4), sharded=ARGS.sharded)
model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
before = peak_mib()
timer = Timer()
model.fit(x, y, batch_size=ARGS.batch_size, epochs=1, verbose=0, shuffle=False, callbacks=[timer])
row = {"rank": hvd.rank(), "peak_before_mib": before, "peak_after_mib": peak_mib(),
       "optimizer_mib": sum(int(np.prod(v.shape)) * 4 for v in opt.inner_optimizer.variables) / 2 ** 20,
       "step_s": sorted(timer.times[2:])[len(timer.times[2:]) // 2]}
rows = hvd.allgather_object(row)
if hvd.rank() == 0:
    with open(ARGS.out, "w") as f:
        json.dump({"backend": keras.backend.backend(), "np": hvd.size(), "sharded": ARGS.sharded, "ranks": rows}, f)
