"""Large allreduces in one MPI call vs in chunks (TFRING_ALLREDUCE_CHUNK_BYTES), against raw mpi4py in the same
processes: raw in place / out of place in one call and in chunks, tfring's TF eager op (out of place: the caller
holds its input) and torch's allreduce_ (in place, as forwarded gradients are), each chunk setting in its own
hvd.init(). Minor page faults per call show the cause (Open MPI maps a fresh temporary for a large call).
Also reducescatter: raw MPI_Reduce_scatter_block vs tfring's (a ring over point-to-point calls from 256 KiB,
ring.cc), TF eager and torch, at the default settings.

    tfringrun -np 2 python benchmarks/allreduce_chunks.py --out benchmarks/results/allreduce_chunks.json
"""
import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import tfring as hvd  # noqa: E402
import tfring.torch as thvd  # noqa: E402
from timing import measure  # noqa: E402

COMM = MPI.COMM_WORLD
MIB = 1 << 20


def raw_cases(a, b, chunk):
    def chunked(send_in_place):
        for s in range(0, a.size, chunk):
            if send_in_place:
                COMM.Allreduce(MPI.IN_PLACE, a[s:s + chunk], op=MPI.SUM)
            else:
                COMM.Allreduce(a[s:s + chunk], b[s:s + chunk], op=MPI.SUM)
    return {"raw in place, one call": lambda: COMM.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM),
            "raw out of place, one call": lambda: COMM.Allreduce(a, b, op=MPI.SUM),
            f"raw in place, {chunk * 4 // MIB} MiB calls": lambda: chunked(True),
            f"raw out of place, {chunk * 4 // MIB} MiB calls": lambda: chunked(False)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-mib", default="16,32,64,96")
    parser.add_argument("--chunks-mib", default="0,4,8,16")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for mib in [int(s) for s in args.sizes_mib.split(",")]:
        a = np.ones(mib * MIB // 4, np.float32)
        b = np.empty_like(a)
        row = {"size_mib": mib}
        for label, fn in raw_cases(a, b, 16 * MIB // 4).items():
            row[label] = measure(fn, args.iters)
        x, t = tf.constant(a), torch.ones(a.size)
        for chunk in [int(c) for c in args.chunks_mib.split(",")]:
            os.environ["TFRING_ALLREDUCE_CHUNK_BYTES"] = str(chunk * MIB)
            hvd.init()
            name = "one call" if chunk == 0 else f"{chunk} MiB calls"
            row[f"tfring TF eager, {name}"] = measure(lambda: hvd.allreduce(x, op=hvd.Sum, name="chunks"), args.iters)
            row[f"tfring torch allreduce_, {name}"] = measure(
                lambda: thvd.allreduce_(t, op=thvd.Sum, name="chunks_t"), args.iters)
            if chunk == 16:  # the default
                out = np.empty(a.size // COMM.size, np.float32)
                rs = a[:out.size * COMM.size]
                row["raw reducescatter"] = measure(lambda: COMM.Reduce_scatter_block(rs, out, op=MPI.SUM), args.iters)
                xs, ts = tf.constant(rs.reshape(COMM.size, -1)), torch.ones(COMM.size, out.size)
                row["tfring TF reducescatter"] = measure(lambda: hvd.reducescatter(xs, op=hvd.Sum, name="rs"),
                                                         args.iters)
                row["tfring torch reducescatter"] = measure(lambda: thvd.reducescatter(ts, op=thvd.Sum, name="rs_t"),
                                                            args.iters)
            hvd.shutdown()
        rows.append(row)
        if COMM.rank == 0:
            print(f"{mib} MiB: " + "; ".join(f"{k} {v[0]:.1f} ms ({v[1]:.0f} faults)" for k, v in row.items()
                                            if k != "size_mib"), flush=True)
    if COMM.rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump({"np": COMM.size, "rows": rows, "unit": "[median ms, minor faults per call]"}, f, indent=1)


if __name__ == "__main__":
    main()
