"""tfring.mxnet's allreduce against raw MPI in the same processes (issue #30 item 1 for MXNet): raw mpi4py in place
and out of place, tfring.mxnet `allreduce` (out of place) and `allreduce_` (in place), 4 KiB - 64 MiB float32,
np=2. MXNet runs ops asynchronously: every call is timed up to `wait_to_read()` of its result. mxnet 1.9.1 needs
numpy < 1.24, so this runs in the MXNet environment (README "MXNet"), from outside the checkout (`-P`):

    cd /tmp && /work/main/.venv-mxnet/bin/python -P -m tfring.runner -np 2 /work/main/.venv-mxnet/bin/python -P \\
        /work/main/benchmarks/mxnet_bench.py --out /work/main/benchmarks/results/mxnet_bench.json
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import tfring.mxnet as hvd  # noqa: E402
from timing import measure  # noqa: E402

COMM = MPI.COMM_WORLD
SIZES = [("4KiB", 4 << 10), ("64KiB", 64 << 10), ("1MiB", 1 << 20), ("16MiB", 16 << 20), ("64MiB", 64 << 20)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=0, help="calls per case (0: by size)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    hvd.init()
    rows = []
    for label, nbytes in SIZES:
        iters = args.iters or (200 if nbytes <= 1 << 20 else 20)
        a = np.ones(nbytes // 4, np.float32)
        b = np.empty_like(a)
        x, y = mx.nd.array(a), mx.nd.array(a)
        cases = {"raw in place": lambda: COMM.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM),
                 "raw out of place": lambda: COMM.Allreduce(a, b, op=MPI.SUM),
                 "tfring allreduce": lambda: hvd.allreduce(x, op=hvd.Sum, name="mx_" + label).wait_to_read(),
                 "tfring allreduce_": lambda: hvd.allreduce_(y, op=hvd.Sum, name="mx_ip_" + label).wait_to_read()}
        row = {"case": "allreduce " + label, "bytes": nbytes}
        for name, fn in cases.items():
            row[name] = measure(fn, iters)
        y[:] = 1.0  # in place: the sums grew; check one result on every rank
        got = hvd.allreduce(x, op=hvd.Sum, name="mx_check_" + label).asnumpy()
        assert np.all(got == COMM.size), (label, got[:4])
        rows.append(row)
        if COMM.rank == 0:
            print("%s: %s" % (label, "; ".join("%s %.3f ms" % (k, v[0]) for k, v in row.items()
                                               if isinstance(v, tuple))), flush=True)
    if COMM.rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump({"np": COMM.size, "mxnet": mx.__version__, "rows": rows,
                       "unit": "[median ms, minor faults per call]"}, f, indent=1)


if __name__ == "__main__":
    main()
