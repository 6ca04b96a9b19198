"""One rank of benchmarks/keras_backends.py: the Keras training step of train_step.py's dense model (25.2 M
params) on the backend Keras runs on (KERAS_BACKEND=tensorflow|jax|torch), one compute thread per rank.

--impl tfring: Keras fit with tfring.keras.DistributedOptimizer(SGD).
--impl none:   Keras fit with plain SGD, no collective (the ceiling: ranks compute side by side).
--impl own:    the backend's own data-parallel option. JAX: jax.distributed (gloo CPU collectives, 127.0.0.1)
               + keras.distribution.DataParallel over every process's CPU device, Keras fit. torch:
               torch.distributed (gloo, 127.0.0.1) + DistributedDataParallel around the Keras model in a custom
               loop (Keras' guide "distributed training with PyTorch"). TensorFlow: MultiWorkerMirroredStrategy
               + Keras fit.
--impl own_none: torch only: the same custom loop with no DDP (that loop's own ceiling).
--impl keras_dp: torch only, keras-nightly (3.16 dev): keras.distribution.DataParallel, Keras fit (torch DDP over
               gloo on 127.0.0.1 underneath, set up by keras.distribution.initialize from MASTER_ADDR/RANK/...).
--impl mpi:    no training: mpi4py's in-place Allreduce (sum) of each of the model's gradients (float32, 25.2 M
               parameters in all) in calls of at most 16 MiB, as tfring reduces them, timed per step (what MPI
               itself takes for one step's gradients); also "per_gradient_one_call_ms" (each gradient in one call)
               and "one_buffer_ms" (all 100.8 MB in one call): Open MPI page-faults a fresh temporary for a call
               over ~32 MiB, about twice as slow (benchmarks/allreduce_chunks.py).

Per rank batch 64 (JAX's DataParallel: 64 per process, so the same global batch). Fit is timed per batch by a
callback that waits for the step's loss; the custom loop per step. The slowest rank's median step counts. If the
impl fails, rank 0 writes {"error": ...} instead of timings. Rank 0 writes --out.
"""
import argparse
import json
import os
import socket
import sys
import time
import traceback

parser = argparse.ArgumentParser()
parser.add_argument("--impl", choices=("tfring", "none", "own", "own_none", "keras_dp", "mpi"), required=True)
parser.add_argument("--batch-size", type=int, default=64, help="per rank")
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--one-core", action="store_true", help="pin to CPU 0 (the np=1 baseline)")
parser.add_argument("--out", required=True)
ARGS = parser.parse_args()
BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
if ARGS.one_core:
    os.sched_setaffinity(0, {0})  # before any framework starts its threads: they inherit it
# One compute thread per rank on every backend (set before the frameworks load).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
os.environ.setdefault("OMP_NUM_THREADS", "1")

from mpi4py import MPI  # noqa: E402

COMM = MPI.COMM_WORLD
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from impl import write_json  # noqa: E402


def free_ports(n):
    """n free 127.0.0.1 ports picked on rank 0, the same on every rank."""
    ports = []
    if COMM.rank == 0:
        socks = [socket.socket() for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        ports = [s.getsockname()[1] for s in socks]
        for s in socks:
            s.close()
    return COMM.bcast(ports, root=0)


if BACKEND == "tensorflow" and ARGS.impl == "own":
    ports = free_ports(COMM.size)
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["127.0.0.1:%d" % p for p in ports]},
                                          "task": {"type": "worker", "index": COMM.rank}})
if BACKEND == "jax" and ARGS.impl == "own":
    import functools

    import jax
    from jax._src import xla_bridge
    # gloo binds to the hostname's address by default; keep every socket on 127.0.0.1.
    xla_bridge._jax.make_gloo_tcp_collectives = functools.partial(xla_bridge._jax.make_gloo_tcp_collectives,
                                                                  hostname="127.0.0.1")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address="127.0.0.1:%d" % free_ports(1)[0], num_processes=COMM.size,
                               process_id=COMM.rank, initialization_timeout=120)

import numpy as np  # noqa: E402

if BACKEND == "tensorflow":
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)  # as train_step.py
    VERSION = "tensorflow " + tf.__version__
elif BACKEND == "torch":
    import torch
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    VERSION = "torch " + torch.__version__
else:
    import jax
    VERSION = "jax " + jax.__version__
import keras  # noqa: E402

FEATURES, CLASSES = 1024, 10
CPU = {}  # process CPU time and wall time when the timed steps start: cores used = their ratio
EXTRA = {}  # further measurements of the impl, into the result
MODELS = []  # the fitted model (checks after the timing)


def build_model():
    """train_step.py's dense model (1024-4096-4096-1024-10, 25.2 M params), same seed on every rank."""
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(4096, activation="relu"),
                             keras.layers.Dense(4096, activation="relu"), keras.layers.Dense(1024, activation="relu"),
                             keras.layers.Dense(CLASSES)])


def data(n):
    rng = np.random.RandomState(COMM.rank)
    return rng.rand(n, FEATURES).astype("float32"), rng.randint(0, CLASSES, size=(n,)).astype("int32")


class StepTimer(keras.callbacks.Callback):
    """Per-batch wall time, ended when the step's loss is ready (JAX dispatches asynchronously)."""

    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_batch_begin(self, batch, logs=None):
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        float(np.asarray(logs["loss"]))
        self.times.append(time.perf_counter() - self.t0)


def fit_times(optimizer, scope=None):
    """Median seconds per Keras fit step after a 3-step warm-up fit (tracing, first allocations)."""
    with scope or _null():
        model = build_model()
        model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data(ARGS.batch_size * ARGS.steps)
    model.fit(x[:3 * ARGS.batch_size], y[:3 * ARGS.batch_size], batch_size=ARGS.batch_size, epochs=1, verbose=0,
              shuffle=False)
    COMM.Barrier()
    timer = StepTimer()
    CPU.update(cpu=time.process_time(), wall=time.perf_counter())
    model.fit(x, y, batch_size=ARGS.batch_size, epochs=1, verbose=0, shuffle=False, callbacks=[timer])
    MODELS.append(model)
    return timer.times


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def torch_loop_times(ddp):
    """Keras' guide's loop: the Keras model (a torch.nn.Module) wrapped in DDP, torch SGD, torch's loss."""
    import torch.distributed as dist
    if ddp:
        port = free_ports(1)[0]
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=COMM.rank,
                                world_size=COMM.size)
    model = build_model()
    net = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
    opt = torch.optim.SGD(net.parameters(), lr=0.001)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = data(ARGS.batch_size)
    x, y = torch.from_numpy(x), torch.from_numpy(y).long()

    def step():
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return float(loss)
    for _ in range(3):
        step()
    COMM.Barrier()
    times = []
    CPU.update(cpu=time.process_time(), wall=time.perf_counter())
    for _ in range(ARGS.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    if ddp:
        dist.destroy_process_group()
    return times


def keras_dp_times():
    """Keras' own torch data parallel (keras-nightly): DDP wraps the model inside fit, gloo on 127.0.0.1."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_ports(1)[0]), RANK=str(COMM.rank),
                      WORLD_SIZE=str(COMM.size), LOCAL_RANK=str(COMM.rank), GLOO_SOCKET_IFNAME="lo")
    if tuple(int(v) for v in keras.version().split(".")[:2]) < (3, 16):
        raise RuntimeError("keras %s has no torch DataParallel: run benchmarks/build_keras_nightly_env.sh"
                           % keras.version())
    keras.distribution.initialize()
    dist = keras.distribution.DataParallel(devices=keras.distribution.list_devices())
    dist.auto_shard_dataset = False  # each process feeds its own 64 samples, as with the other options
    keras.distribution.set_distribution(dist)
    times = fit_times(keras.optimizers.SGD(0.001))
    import torch.distributed
    torch.distributed.destroy_process_group()
    # It really ran data parallel: fit wrapped the model in DDP, and every rank ends with the same weights.
    weights = np.concatenate([np.ravel(keras.ops.convert_to_numpy(w)) for w in MODELS[0].weights])
    EXTRA.update(ddp_wrapped=MODELS[0].ddp_model is not None,
                 same_weights_on_every_rank=all(np.array_equal(weights, w) for w in COMM.allgather(weights)))
    return times


def mpi_times():
    """Per step: each gradient in place in calls of at most 16 MiB (as tfring by default; timed), each in one call,
    and all of them as one buffer in one call (into EXTRA)."""
    bufs = [np.ones(int(np.prod(v.shape)), np.float32) for v in build_model().trainable_variables]
    whole = np.ones(sum(b.size for b in bufs), np.float32)
    chunk = (16 << 20) // 4

    def chunked():
        for b in bufs:
            for s in range(0, b.size, chunk):
                COMM.Allreduce(MPI.IN_PLACE, b[s:s + chunk], op=MPI.SUM)

    def one_call_each():
        for b in bufs:
            COMM.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM)
    variants = {"chunked": chunked, "per_gradient_one_call_ms": one_call_each,
                "one_buffer_ms": lambda: COMM.Allreduce(MPI.IN_PLACE, whole, op=MPI.SUM)}
    times = {k: [] for k in variants}
    CPU.update(cpu=time.process_time(), wall=time.perf_counter())
    for i in range(ARGS.steps + 2):
        for k, fn in variants.items():
            COMM.Barrier()
            t0 = time.perf_counter()
            fn()
            if i >= 2:
                times[k].append(time.perf_counter() - t0)
    for k in variants:
        if k != "chunked":
            EXTRA[k] = 1000 * COMM.allreduce(float(np.median(times[k])), op=MPI.MAX)
    return times["chunked"]


def run():
    if ARGS.impl == "mpi":
        return mpi_times()
    if ARGS.impl == "none":
        return fit_times(keras.optimizers.SGD(0.001))
    if ARGS.impl == "tfring":
        import tfring.keras as hvd
        hvd.init()
        return fit_times(hvd.DistributedOptimizer(keras.optimizers.SGD(0.001)))
    if BACKEND == "torch" and ARGS.impl == "keras_dp":
        return keras_dp_times()
    if BACKEND == "torch":
        return torch_loop_times(ddp=ARGS.impl == "own")
    if ARGS.impl == "own_none":
        raise SystemExit("--impl own_none is the torch custom loop only")
    if BACKEND == "jax":
        dist = keras.distribution.DataParallel(devices=jax.devices())
        dist.auto_shard_dataset = False  # each process feeds its own 64 samples (Keras' multi-process recipe)
        keras.distribution.set_distribution(dist)
        return fit_times(keras.optimizers.SGD(0.001))
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    return fit_times(keras.optimizers.SGD(0.001), scope=strategy.scope())


def main():
    result = {"backend": BACKEND, "impl": ARGS.impl, "np": COMM.size, "one_core": ARGS.one_core,
              "batch_per_rank": ARGS.batch_size, "steps": ARGS.steps, "version": VERSION,
              "keras": keras.__version__, "xla_flags": os.environ["XLA_FLAGS"]}
    try:
        times = run()
    except Exception as e:  # the backend's own option may not run here: record why
        traceback.print_exc()
        msg = str(e).strip().splitlines() or [""]
        result["error"] = "%s: %s" % (type(e).__name__, msg[0][:200] + (" ... " + msg[-1][:200] if len(msg) > 1
                                                                          else ""))
        if COMM.rank == 0:
            write_json(ARGS.out, result)
        sys.stdout.flush()
        os._exit(0)  # other ranks may be stuck in the failed collective
    cores = (time.process_time() - CPU["cpu"]) / (time.perf_counter() - CPU["wall"])
    step = COMM.allreduce(float(np.median(times)), op=MPI.MAX)
    result["cores_used_max"] = COMM.allreduce(cores, op=MPI.MAX)  # busiest rank: CPU s / wall s while timed
    result["cores_used_min"] = COMM.allreduce(cores, op=MPI.MIN)
    result.update(step_ms=1000 * step, samples_per_sec=ARGS.batch_size * COMM.size / step,
                  per_rank_samples_per_sec=ARGS.batch_size / step, **EXTRA)
    if COMM.rank == 0:
        print(json.dumps(result))
        write_json(ARGS.out, result)


if __name__ == "__main__":
    main()
