"""Training-step throughput of a dense model (~25 M params, one intra-op thread per process), np=1 vs np=2:
`--mode tape` (gradients and their allreduces in one tf.function via DistributedGradientTape, then SGD) or
`--mode fit` (Keras fit with DistributedOptimizer). `--impl tfring|horovod|mwms` picks the library; mwms is
tf.distribute.MultiWorkerMirroredStrategy in a custom loop (tape mode only: Keras 3's fit() under MWMS fails in
its symbolic build on this TF/Keras); `--impl none` runs the same custom loop with no collective at all (the
ceiling: what two processes computing side by side reach on this machine). Scaling efficiency = samples/s at
np=2 / (2 x at np=1).

    tfringrun -np 2 python benchmarks/train_step.py --impl tfring --mode tape --out r.json
--jit-compile compiles the step with XLA (tf.function(jit_compile=True), or Keras compile(jit_compile=True)).
--one-core pins the process to CPU 0 before TensorFlow starts (the fair np=1 baseline on a 2-core machine: each
np=2 rank has one core).
"""
import argparse
import json
import os
import socket
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--impl", choices=("tfring", "horovod", "mwms", "none"), default="tfring")
parser.add_argument("--mode", choices=("tape", "fit"), default="tape")
parser.add_argument("--batch-size", type=int, default=64, help="per rank")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--one-core", action="store_true")
parser.add_argument("--op", choices=("average", "sum"), default="average",
                    help="the tape's reduction (sum: what Average's division costs in the step)")
parser.add_argument("--jit-compile", action="store_true",
                    help="compile the step with XLA (tf.function(jit_compile=True) / compile(jit_compile=True))")
parser.add_argument("--out")
ARGS = parser.parse_args()
if ARGS.one_core:
    os.sched_setaffinity(0, {0})  # before TensorFlow starts its threads: they inherit it
if ARGS.impl == "mwms" and ARGS.mode != "tape":
    sys.exit("--impl mwms measures the custom loop only (--mode tape)")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from mpi4py import MPI  # noqa: E402

COMM = MPI.COMM_WORLD
if ARGS.impl == "mwms":
    def free_port():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return port
    ports = COMM.bcast([free_port() for _ in range(COMM.size)] if COMM.rank == 0 else None, root=0)
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["127.0.0.1:%d" % p for p in ports]},
                                          "task": {"type": "worker", "index": COMM.rank}})
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)
import keras  # noqa: E402

from impl import load, write_json  # noqa: E402

FEATURES, CLASSES = 1024, 10


def build_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(4096, activation="relu"),
                             keras.layers.Dense(4096, activation="relu"), keras.layers.Dense(1024, activation="relu"),
                             keras.layers.Dense(CLASSES)])


def data():
    rng = np.random.RandomState(COMM.rank)
    x = rng.rand(ARGS.batch_size * 4, FEATURES).astype("float32")
    y = rng.randint(0, CLASSES, size=(ARGS.batch_size * 4,))
    return x, y


def dataset(batch):
    x, y = data()
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch)


def timed(run_steps):
    run_steps(3)  # warm-up: tracing, first allocations
    COMM.Barrier()
    t0 = time.perf_counter()
    run_steps(ARGS.steps)
    return COMM.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def run_tape():
    if ARGS.impl == "mwms":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model, opt = build_model(), keras.optimizers.SGD(0.001)
    else:
        if ARGS.impl != "none":
            hvd = load(ARGS.impl)
            hvd.init()
        model, opt = build_model(), keras.optimizers.SGD(0.001)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = (tf.constant(a[:ARGS.batch_size]) for a in data())

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            if ARGS.impl == "mwms":
                loss = loss / COMM.size  # Keras' optimizer sums the gradients over MWMS replicas
        if ARGS.impl not in ("mwms", "none"):
            tape = hvd.DistributedGradientTape(tape, op=hvd.Sum if ARGS.op == "sum" else hvd.Average)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step = tf.function(replica_step if ARGS.impl != "mwms" else lambda x, y: strategy.run(replica_step, (x, y)),
                       jit_compile=ARGS.jit_compile)

    def run_steps(n):
        for _ in range(n):
            loss = step(x, y)
        np.asarray(loss)
    return model, timed(run_steps)


def run_fit():
    hvd = load(ARGS.impl, keras_api=True)
    hvd.init()
    model = build_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.001)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=ARGS.jit_compile)
    ds = dataset(ARGS.batch_size)

    class StepTimer(keras.callbacks.Callback):
        """Per-batch wall time (a batch-level callback, as verbose=1's progress bar: Keras then finishes each
        step before the next). Without one, both Keras 3 and tf.keras 2.15 ran 1.5-2x slower per step here at
        np=1 on one core, growing with the step count: not understood, so not measured that way."""
        times = []

        def on_train_batch_begin(self, batch, logs=None):
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter() - self.t0)
    timer = StepTimer()
    model.fit(ds, steps_per_epoch=3, epochs=1, verbose=0)  # warm-up: tracing, first allocations
    COMM.Barrier()
    model.fit(ds, steps_per_epoch=ARGS.steps, epochs=1, verbose=0, callbacks=[timer])
    return model, COMM.allreduce(float(np.median(timer.times)), op=MPI.MAX) * ARGS.steps


def main():
    model, seconds = run_tape() if ARGS.mode == "tape" else run_fit()
    result = {"impl": ARGS.impl, "mode": ARGS.mode, "np": COMM.size, "one_core": ARGS.one_core,
              "jit_compile": ARGS.jit_compile,
              "params": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
              "batch_per_rank": ARGS.batch_size, "steps": ARGS.steps, "step_ms": 1000 * seconds / ARGS.steps,
              "samples_per_sec": ARGS.batch_size * COMM.size * ARGS.steps / seconds, "tf": tf.__version__}
    if COMM.rank == 0:
        print(json.dumps(result))
        if ARGS.out:
            write_json(ARGS.out, result)


if __name__ == "__main__":
    main()
