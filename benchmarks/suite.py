"""Side-by-side benchmark, one job at np=2: a collective library (tfring, or Horovod in its own environment) vs
raw mpi4py in the same processes (the ceiling), optionally tf.distribute MultiWorkerMirroredStrategy too.
Writes JSON rows of medians (ms) and minor page faults per call; run_all.py merges the jobs into one table.

    tfringrun -np 2 python benchmarks/suite.py --impl tfring --mwms --out benchmarks/results/suite.json
"""
import argparse
import json
import os
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from mpi4py import MPI  # noqa: E402

from impl import IMPLS, load, write_json  # noqa: E402
from timing import measure  # noqa: E402

COMM = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--impl", choices=IMPLS, default="tfring")
parser.add_argument("--mwms", action="store_true", help="also measure MultiWorkerMirroredStrategy")
parser.add_argument("--shapes", help="JSON file of the ResNet-50 gradient shapes (written if missing)")
parser.add_argument("--out", default="benchmarks/results/suite.json")
ARGS = parser.parse_args()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


if ARGS.mwms:
    # MWMS must be created before TensorFlow runs anything: agree on ports first (rank 0 picks, all learn them).
    ports = COMM.bcast([free_port() for _ in range(COMM.size)] if COMM.rank == 0 else None, root=0)
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["127.0.0.1:%d" % p for p in ports]},
                                          "task": {"type": "worker", "index": COMM.rank}})
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

STRATEGY = tf.distribute.MultiWorkerMirroredStrategy() if ARGS.mwms else None
hvd = load(ARGS.impl)

SIZES = [("4KiB", 4 << 10), ("64KiB", 64 << 10), ("1MiB", 1 << 20), ("4MiB", 4 << 20), ("16MiB", 16 << 20),
         ("64MiB", 64 << 20)]


def iters_for(nbytes):
    return 100 if nbytes <= (1 << 20) else 10 if nbytes <= (16 << 20) else 5


def put(row, key, fn, n):
    row[key + "_ms"], row[key + "_faults"] = measure(fn, n)


def mwms_allreduce_fn():
    def replica_fn(v):
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, v * 1.0)

    @tf.function
    def run(x):
        return STRATEGY.run(replica_fn, args=(x,))
    return run


def bench_allreduce(rows):
    eager = lambda x: hvd.allreduce(x, op=hvd.Sum, name="bench")  # noqa: E731
    graph = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum, name="bench"))
    floor = tf.function(lambda x: x * 2.0)  # TF's own cost of calling a tf.function, no collective in it
    mwms = mwms_allreduce_fn() if STRATEGY else None
    for label, nbytes in SIZES:
        arr = np.ones(nbytes // 4, np.float32)
        x = tf.constant(arr)
        n = iters_for(nbytes)
        r = {"case": "allreduce %s" % label, "bytes": nbytes}
        put(r, "raw", lambda: COMM.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM), n)
        put(r, "eager", lambda: eager(x), n)
        put(r, "function", lambda: graph(x), n)
        if mwms:
            put(r, "mwms", lambda: mwms(x), n)
        if nbytes <= (64 << 10):
            put(r, "tf_function_floor", lambda: floor(x), n)
        # Any TF op returns a newly allocated tensor: TF's own cost of producing this much fresh output.
        put(r, "tf_new_tensor", lambda: x * 1.0, n)
        rows.append(r)


def resnet50_shapes(path):
    if path and os.path.exists(path):
        return [tuple(s) for s in json.load(open(path))]
    import keras
    shapes = [tuple(v.shape) for v in keras.applications.ResNet50(weights=None).trainable_variables]
    if path and COMM.rank == 0:
        write_json(path, shapes)
    COMM.Barrier()
    return shapes


def bench_resnet_set(rows):
    shapes = resnet50_shapes(ARGS.shapes)
    arrays = [np.ones(s, np.float32) for s in shapes]
    tensors = [tf.constant(a) for a in arrays]
    params = sum(a.size for a in arrays)

    def raw():
        for a in arrays:
            COMM.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)

    grouped = tf.function(lambda ts: hvd.grouped_allreduce(ts, op=hvd.Average))
    w = [tf.Variable(t) for t in tensors]

    def tape_step(distributed):
        @tf.function
        def step(scale):
            # Gradients computed at run time in the same tf.function as their allreduces (as in a training step).
            # They must not be constants: TF's constant folding would run a collective that is not marked
            # stateful (Horovod's) once at graph optimisation and return the folded result on every later call.
            with tf.GradientTape() as tape:
                loss = tf.add_n([tf.reduce_sum(v) for v in w]) * scale
            if distributed:
                tape = hvd.DistributedGradientTape(tape)
            return tape.gradient(loss, w)
        return lambda: step(tf.constant(1.0))

    r = {"case": "ResNet-50 gradients (%d tensors, %.2f M params)" % (len(shapes), params / 1e6),
         "bytes": params * 4}
    put(r, "raw", raw, 5)
    put(r, "function", lambda: grouped(tensors), 5)
    put(r, "tape", tape_step(True), 5)
    put(r, "tf_gradients_floor", tape_step(False), 5)  # the same step without communication
    if STRATEGY:
        mwms = tf.function(lambda ts: STRATEGY.run(
            lambda *vs: tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                                       [v * 1.0 for v in vs]), args=ts))
        put(r, "mwms", lambda: mwms(tuple(tensors)), 3)
    rows.append(r)


def bench_broadcast_allgather(rows):
    arr = np.ones((64 << 20) // 4, np.float32)
    x = tf.constant(arr)
    r = {"case": "broadcast 64MiB", "bytes": arr.nbytes}
    put(r, "raw", lambda: COMM.Bcast(arr, root=0), 5)
    put(r, "eager", lambda: hvd.broadcast(x, 0, name="bench_bcast"), 5)
    rows.append(r)
    part = np.ones((16 << 20) // 4, np.float32)
    out = np.empty(part.size * COMM.size, np.float32)
    y = tf.constant(part)
    r = {"case": "allgather 16MiB per rank", "bytes": part.nbytes}
    put(r, "raw", lambda: COMM.Allgather(part, out), 5)
    put(r, "eager", lambda: hvd.allgather(y, name="bench_gather"), 5)
    rows.append(r)


def main():
    hvd.init()
    rows = []
    bench_allreduce(rows)
    bench_resnet_set(rows)
    bench_broadcast_allgather(rows)
    if hvd.rank() == 0:
        for r in rows:
            print(json.dumps(r))
        write_json(ARGS.out, {"np": hvd.size(), "impl": ARGS.impl, "tf": tf.__version__, "rows": rows})


if __name__ == "__main__":
    main()
