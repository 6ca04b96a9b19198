"""Side-by-side benchmark, one job at np=2: tfring vs raw mpi4py (the ceiling) vs tf.distribute
MultiWorkerMirroredStrategy, in the same processes. Writes JSON and a markdown table of medians and ratios.

    tfringrun -np 2 python benchmarks/suite.py --out benchmarks/results/suite.json
"""
import argparse
import json
import os
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from mpi4py import MPI  # noqa: E402

COMM = MPI.COMM_WORLD


def free_port():
    s = socket.socket()
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# MWMS must be created before TensorFlow runs anything: agree on ports first (rank 0 picks, all learn them).
ports = COMM.bcast([free_port() for _ in range(COMM.size)] if COMM.rank == 0 else None, root=0)
os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["localhost:%d" % p for p in ports]},
                                      "task": {"type": "worker", "index": COMM.rank}})
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

STRATEGY = tf.distribute.MultiWorkerMirroredStrategy()
import tfring as hvd  # noqa: E402
from timing import median_ms  # noqa: E402

SIZES = [("4KiB", 4 << 10), ("64KiB", 64 << 10), ("1MiB", 1 << 20), ("4MiB", 4 << 20), ("16MiB", 16 << 20),
         ("64MiB", 64 << 20)]


def iters_for(nbytes):
    return 100 if nbytes <= (1 << 20) else 10 if nbytes <= (16 << 20) else 5


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
    mwms = mwms_allreduce_fn()
    for label, nbytes in SIZES:
        arr = np.ones(nbytes // 4, np.float32)
        x = tf.constant(arr)
        n = iters_for(nbytes)
        r = {"case": "allreduce %s" % label, "bytes": nbytes,
             "raw_ms": median_ms(lambda: COMM.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM), n),
             "tfring_eager_ms": median_ms(lambda: eager(x), n),
             "tfring_function_ms": median_ms(lambda: graph(x), n),
             "mwms_ms": median_ms(lambda: mwms(x), n)}
        if nbytes <= (64 << 10):
            r["tf_function_floor_ms"] = median_ms(lambda: floor(x), n)
        # Any TF op returns a freshly allocated tensor; for large sizes its page faults are a floor raw MPI
        # (reducing in place in one warm buffer) never pays.
        r["tf_new_tensor_ms"] = median_ms(lambda: x * 1.0, n)
        rows.append(r)


def resnet50_shapes():
    import keras
    model = keras.applications.ResNet50(weights=None)
    return [tuple(v.shape) for v in model.trainable_variables]


def bench_resnet_set(rows):
    shapes = resnet50_shapes()
    arrays = [np.ones(s, np.float32) for s in shapes]
    tensors = [tf.constant(a) for a in arrays]
    params = sum(a.size for a in arrays)

    def raw():
        for a in arrays:
            COMM.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)

    grouped = tf.function(lambda ts: hvd.grouped_allreduce(ts, op=hvd.Average))
    w = [tf.Variable(t) for t in tensors]

    @tf.function
    def tape_step():
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(v) for v in w])
        tape = hvd.DistributedGradientTape(tape)
        return tape.gradient(loss, w)

    mwms = tf.function(lambda ts: STRATEGY.run(
        lambda *vs: tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                                   [v * 1.0 for v in vs]), args=ts))
    rows.append({"case": "ResNet-50 gradients (%d tensors, %.2f M params)" % (len(shapes), params / 1e6),
                 "bytes": params * 4, "raw_ms": median_ms(raw, 5),
                 "tfring_function_ms": median_ms(lambda: grouped(tensors), 5),
                 "tfring_tape_ms": median_ms(tape_step, 5),
                 "mwms_ms": median_ms(lambda: mwms(tuple(tensors)), 3)})


def bench_broadcast_allgather(rows):
    arr = np.ones((64 << 20) // 4, np.float32)
    x = tf.constant(arr)
    rows.append({"case": "broadcast 64MiB", "bytes": arr.nbytes,
                 "raw_ms": median_ms(lambda: COMM.Bcast(arr, root=0), 5),
                 "tfring_eager_ms": median_ms(lambda: hvd.broadcast(x, 0, name="bench_bcast"), 5)})
    part = np.ones((16 << 20) // 4, np.float32)
    out = np.empty(part.size * COMM.size, np.float32)
    y = tf.constant(part)
    rows.append({"case": "allgather 16MiB per rank", "bytes": part.nbytes,
                 "raw_ms": median_ms(lambda: COMM.Allgather(part, out), 5),
                 "tfring_eager_ms": median_ms(lambda: hvd.allgather(y, name="bench_gather"), 5)})


def table(rows):
    cols = ["raw_ms", "tfring_eager_ms", "tfring_function_ms", "tfring_tape_ms", "mwms_ms"]
    lines = ["| case | raw mpi4py ms | tfring eager ms | tfring tf.function ms | tfring tape ms | MWMS ms | "
             "best tfring / raw | MWMS / best tfring |", "|" + " --- |" * 8]
    for r in rows:
        cells = ["%.3f" % r[c] if c in r else "" for c in cols]
        best = min(r[c] for c in cols[1:4] if c in r)
        ratio_mw = "%.1f" % (r["mwms_ms"] / best) if "mwms_ms" in r else ""
        lines.append("| %s | %s | %.2f | %s |" % (r["case"], " | ".join(cells), best / r["raw_ms"], ratio_mw))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/suite.json")
    args = parser.parse_args()
    hvd.init()
    rows = []
    bench_allreduce(rows)
    bench_resnet_set(rows)
    bench_broadcast_allgather(rows)
    if hvd.rank() == 0:
        text = table(rows)
        print(text)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"np": hvd.size(), "rows": rows}, f, indent=1)
        with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
