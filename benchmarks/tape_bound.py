"""What bounds the ResNet-50 gradient set through DistributedGradientTape against raw MPI (issue #30 item 3): in
one job at np=2, raw mpi4py's in-place allreduce of the 214 arrays, and the tape inside a tf.function with
Average and with Sum, over two kinds of gradients: `reduce_sum(v)`'s (what benchmarks/suite.py times: TF's
common-subexpression elimination makes every same-shaped variable's gradient one shared tensor, which no op may
reduce in place) and `reduce_sum(v * v)`'s (a distinct gradient per variable, as in a training step: every one is
forwarded and reduced in place), each with the same step without the collective (`floor`).

    tfringrun -np 2 python benchmarks/tape_bound.py --out benchmarks/results/tape_bound.json [--label run1]
    HVD_ENV/bin/mpirun -np 2 --bind-to none HVD_ENV/bin/python benchmarks/tape_bound.py --impl horovod --label hvd
"""
import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from mpi4py import MPI  # noqa: E402

from impl import IMPLS, load  # noqa: E402
from timing import median_ms  # noqa: E402

COMM = MPI.COMM_WORLD
SHAPES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "resnet50_shapes.json")


def tape_step(hvd, w, loss_of, op):
    @tf.function
    def step(scale):
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(loss_of(v)) for v in w]) * scale
        if op is not None:
            tape = hvd.DistributedGradientTape(tape, op=op)
        return tape.gradient(loss, w)
    one = tf.constant(1.0)
    return lambda: step(one)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/tape_bound.json")
    parser.add_argument("--label", default="run")
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--impl", choices=IMPLS, default="tfring")
    args = parser.parse_args()
    hvd = load(args.impl)
    hvd.init()
    arrays = [np.ones(s, np.float32) for s in json.load(open(SHAPES))]
    w = [tf.Variable(a) for a in arrays]

    def raw():
        for a in arrays:
            COMM.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
    row = {"raw": median_ms(raw, args.iters)}
    for kind, loss_of in (("shared", lambda v: v), ("distinct", lambda v: v * v)):
        for label, op in (("floor", None), ("Sum", hvd.Sum), ("Average", hvd.Average)):
            row["%s %s" % (kind, label)] = median_ms(tape_step(hvd, w, loss_of, op), args.iters)
    row["raw again"] = median_ms(raw, args.iters)
    row = dict({k: round(v, 2) for k, v in row.items()}, impl=args.impl)
    if COMM.rank == 0:
        runs = json.load(open(args.out)) if os.path.exists(args.out) else {}
        runs[args.label] = row
        with open(args.out, "w") as f:
            json.dump(runs, f, indent=1)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
