"""What Average costs over Sum (issue #30): torch's in-place allreduce_ (what forwarded gradients get) with
op=Average and op=Sum, alternating in one job, at 1, 16 and 96 MiB of float32, beside raw mpi4py's in-place
MPI_SUM. Average used to be Sum plus a division pass over the result; at np=2 it is now folded into the
reduction (an MPI op that halves as it adds, mpi_context.cc PairMean). Run the same script against an older build
(another PYTHONPATH) for the before/after pair:

    tfringrun -np 2 python benchmarks/average_cost.py --label after --out benchmarks/results/average_cost.json
"""
import argparse
import json
import os

import numpy as np
import torch
from mpi4py import MPI

import tfring.torch as hvd
from timing import median_ms

COMM = MPI.COMM_WORLD


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/average_cost.json")
    parser.add_argument("--label", default="run")
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args()
    hvd.init()
    rows = []
    for mib in (1, 16, 96):
        t = torch.ones(mib << 18)
        raw = np.ones(mib << 18, dtype=np.float32)
        row = {"mib": mib}
        for _ in range(2):  # alternate: drift hits every case alike; the second pass counts
            row["raw_sum_ms"] = median_ms(lambda: COMM.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM), args.iters)
            row["sum_ms"] = median_ms(lambda: hvd.allreduce_(t, op=hvd.Sum, name="cost_%d" % mib), args.iters)
            row["average_ms"] = median_ms(lambda: hvd.allreduce_(t, op=hvd.Average, name="cost_%d" % mib),
                                          args.iters)
        row["average_over_sum"] = row["average_ms"] / row["sum_ms"]
        rows.append(row)
        if COMM.rank == 0:
            print(args.label, json.dumps(row), flush=True)
    if COMM.rank == 0:
        runs = json.load(open(args.out)) if os.path.exists(args.out) else []
        runs.append({"label": args.label, "np": COMM.size, "rows": rows})
        with open(args.out, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
