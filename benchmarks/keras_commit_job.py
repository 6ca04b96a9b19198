"""One launch of `benchmarks/commit_cost.py --keras`: a Keras 3 MLP (--params weights) trained with
tfring.keras's DistributedOptimizer(Adam), its state sharded (BENCH_SHARDED=1, ZeRO stage 1) or not, a KerasState
commit every BENCH_COMMIT_EVERY steps (BENCH_COMMIT=0: none); prints one JSON line from rank 0, as commit_job.py:
the mean step time (commits included) and the median time of `state.commit()` itself. A sharded commit all-gathers
the optimizer state into host memory on every rank (docs/sharded-optimizer.md); an unsharded one copies it."""
import json
import os
import statistics
import sys
import time

import keras
import numpy as np

import tfring.keras as hvd

params, steps = int(sys.argv[1]), int(sys.argv[2])
COMMIT = os.environ.get("BENCH_COMMIT", "1") == "1"
EVERY = int(os.environ.get("BENCH_COMMIT_EVERY", "1"))
SHARDED = int(os.environ.get("BENCH_SHARDED", "0"))
hvd.init()
width = int((params / 2) ** 0.5)
model = keras.Sequential([keras.Input((width,)), keras.layers.Dense(width, activation="relu"),
                          keras.layers.Dense(width)])
optimizer = hvd.DistributedOptimizer(keras.optimizers.Adam(1e-6), sharded=SHARDED)
model.compile(optimizer=optimizer, loss="mse")
state = hvd.elastic.KerasState(model, optimizer, step=0)
rng = np.random.RandomState(hvd.rank())
x, y = rng.randn(8, width).astype("float32"), rng.randn(8, width).astype("float32")
step_s, commit_s = [], []


@hvd.elastic.run
def train(state):
    while state.step < steps:
        start = time.perf_counter()
        model.train_on_batch(x, y)
        state.step += 1
        if COMMIT and state.step % EVERY == 0:
            before = time.perf_counter()
            state.commit()
            commit_s.append(time.perf_counter() - before)
        step_s.append(time.perf_counter() - start)


train(state)
if hvd.rank() == 0:
    # The first steps trace the step function, and the first two commits trace the state's gathers (0.1-0.4 s
    # each on JAX): measured from the third commit period on.
    skip = min(2 * EVERY, steps // 2)
    print("RESULT " + json.dumps({"step_ms": 1e3 * statistics.mean(step_s[skip:]),
                                  "commit_ms": 1e3 * statistics.median(commit_s[skip:]) if commit_s else 0.0,
                                  "params": sum(int(np.prod(v.shape)) for v in model.trainable_variables),
                                  "backend": keras.backend.backend()}), flush=True)
