"""Allreduce latency: tfring (eager and tf.function, inputs fed at run time) next to raw mpi4py Allreduce in
the same processes. Run: tfringrun -np 2 python benchmarks/allreduce_vs_mpi4py.py [--out results/x.json]"""
import argparse
import json
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from mpi4py import MPI  # noqa: E402

import tfring as hvd  # noqa: E402
from timing import median_ms  # noqa: E402

SIZES = {"4KiB": 4 << 10, "1MiB": 1 << 20, "16MiB": 16 << 20, "64MiB": 64 << 20}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--sizes", default="4KiB,1MiB,64MiB")
    args = parser.parse_args()
    hvd.init()
    comm = MPI.COMM_WORLD
    tf.config.threading.set_intra_op_parallelism_threads(1)
    fn_graph = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum, name="bench"))
    rows = []
    for label in args.sizes.split(","):
        nbytes = SIZES[label]
        iters = 200 if nbytes <= (1 << 20) else 20
        arr = np.ones(nbytes // 4, np.float32)
        x = tf.constant(arr)
        raw = median_ms(lambda: comm.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM), iters)
        eager = median_ms(lambda: hvd.allreduce(x, op=hvd.Sum, name="bench"), iters)
        graph = median_ms(lambda: fn_graph(x), iters)
        rows.append({"size": label, "bytes": nbytes, "mpi4py_ms": raw, "tfring_eager_ms": eager,
                     "tfring_function_ms": graph, "eager_vs_raw": eager / raw, "function_vs_raw": graph / raw})
    if hvd.rank() == 0:
        print("| size | mpi4py ms | tfring eager ms | tfring tf.function ms | eager/raw | function/raw |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print("| %s | %.3f | %.3f | %.3f | %.2f | %.2f |" % (r["size"], r["mpi4py_ms"], r["tfring_eager_ms"],
                                                                r["tfring_function_ms"], r["eager_vs_raw"],
                                                                r["function_vs_raw"]))
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                json.dump({"np": hvd.size(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
