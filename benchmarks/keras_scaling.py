"""Keras fit throughput of a small synthetic CNN, one intra-op thread per process: run at np=1 and np=2 and
compare (scaling efficiency = img/s at np=2 / (2 x img/s at np=1)).

    tfringrun -np 1 python benchmarks/keras_scaling.py; tfringrun -np 2 python benchmarks/keras_scaling.py
--one-core pins the process to CPU 0: a fair np=1 baseline on a 2-core machine, where an unpinned single process
also gets the second core for tf.data, inter-op work and Python, which the np=2 ranks must share.
"""
import argparse
import json
import os
import sys
import time

if "--one-core" in sys.argv:
    os.sched_setaffinity(0, {0})  # before TensorFlow starts its threads: they inherit it

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfring.keras as hvd  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=64, help="per rank")
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--out")
parser.add_argument("--one-core", action="store_true", help="pin to CPU 0 (see above)")
args = parser.parse_args()

hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)
keras.utils.set_random_seed(0)
model = keras.Sequential([
    keras.Input((32, 32, 3)),
    keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.MaxPooling2D(),
    keras.layers.Flatten(), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10),
])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.RandomState(hvd.rank())
x = rng.rand(args.batch_size * 8, 32, 32, 3).astype("float32")
y = rng.randint(0, 10, size=(args.batch_size * 8,))
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(args.batch_size)
model.fit(ds, steps_per_epoch=10, epochs=1, verbose=0)  # warm-up: tracing, cache fill


class Timer(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.t0 = time.perf_counter()

    def on_train_end(self, logs=None):
        self.elapsed = time.perf_counter() - self.t0


timer = Timer()
model.fit(ds, steps_per_epoch=args.steps, epochs=1, verbose=0, callbacks=[timer])
per_rank = args.batch_size * args.steps / timer.elapsed
total = float(hvd.allreduce(np.array(per_rank), op=hvd.Sum, name="throughput"))
if hvd.rank() == 0:
    result = {"np": hvd.size(), "one_core": args.one_core, "img_per_sec_total": total,
              "img_per_sec_per_rank": total / hvd.size()}
    print(json.dumps(result))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f)
