"""What bounds tfring's broadcast, allgather and eager allreduce against raw MPI (issue #30 items 1-2): the same
collective timed raw into a reused buffer, raw into a fresh output per call (as a framework op must produce one),
raw into a fresh output plus the root's copy (tfring broadcasts in place into its output), allreduce raw in place
and out of place (an eager op must leave its input, which the caller holds, untouched), and tfring's eager op, in
one job at np=2; run it once with TensorFlow's default CPU allocator and once with TF_CPU_ALLOCATOR_USE_BFC=true.

    tfringrun -np 2 python benchmarks/bcast_bound.py --out benchmarks/results/bcast_bound.json [--label bfc]
"""
import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from mpi4py import MPI  # noqa: E402

import tfring as hvd  # noqa: E402
from timing import measure  # noqa: E402

COMM = MPI.COMM_WORLD


def cases():
    src = np.ones((64 << 20) // 4, np.float32)
    reused = np.empty_like(src)
    x = tf.constant(src)

    def fresh_bcast(copy):
        out = np.empty_like(src)
        if copy and COMM.rank == 0:
            np.copyto(out, src)
        COMM.Bcast(out, root=0)
    yield "broadcast 64 MiB", {
        "raw, reused buffer": lambda: COMM.Bcast(reused if COMM.rank else src, root=0),
        "raw, fresh output": lambda: fresh_bcast(False),
        "raw, fresh output + root copy": lambda: fresh_bcast(True),
        "tfring eager": lambda: hvd.broadcast(x, 0, name="bound_bcast")}
    part = np.ones((16 << 20) // 4, np.float32)
    gathered = np.empty(part.size * COMM.size, np.float32)
    y = tf.constant(part)
    yield "allgather 16 MiB per rank", {
        "raw, reused buffer": lambda: COMM.Allgather(part, gathered),
        "raw, fresh output": lambda: COMM.Allgather(part, np.empty_like(gathered)),
        "tfring eager": lambda: hvd.allgather(y, name="bound_gather")}
    for size in (64 << 10, 1 << 20, 16 << 20, 64 << 20):
        buf = np.ones(size // 4, np.float32)
        out = np.empty_like(buf)
        z = tf.constant(buf)
        yield "allreduce %d KiB" % (size >> 10), {
            "raw, in place": lambda buf=buf: COMM.Allreduce(MPI.IN_PLACE, buf),
            "raw, out of place, reused output": lambda buf=buf, out=out: COMM.Allreduce(buf, out),
            "raw, out of place, fresh output": lambda buf=buf: COMM.Allreduce(buf, np.empty_like(buf)),
            "tfring eager": lambda z=z, size=size: hvd.allreduce(z, op=hvd.Sum, name="bound_ar%d" % size)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/bcast_bound.json")
    parser.add_argument("--label", default="default allocator")
    args = parser.parse_args()
    hvd.init()
    rows = []
    for case, variants in cases():
        for name, fn in variants.items():
            ms, faults = measure(fn, 9)
            rows.append({"case": case, "variant": name, "ms": round(ms, 3), "faults": round(faults)})
    if COMM.rank == 0:
        runs = json.load(open(args.out)) if os.path.exists(args.out) else {}
        runs[args.label] = rows
        with open(args.out, "w") as f:
            json.dump(runs, f, indent=1)
        for r in rows:
            print("%-26s %-30s %8.3f ms %7d faults" % (r["case"], r["variant"], r["ms"], r["faults"]))


if __name__ == "__main__":
    main()
