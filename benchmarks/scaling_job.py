"""Rank side of benchmarks/scaling.py, on emulated hosts: point-to-point probes within a host and across hosts
(the cost model's inputs), then allreduce of 1-64 MiB and of the ResNet-50 gradient set with raw mpi4py (flat,
and hierarchical over split communicators: the ceilings) and with tfring, flat and then hierarchical (tfring is
shut down and initialised again with TFRING_HIERARCHICAL_ALLREDUCE=1, in the same processes). One JSON out."""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from impl import write_json  # noqa: E402
from timing import median_ms  # noqa: E402

COMM = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--sizes-mib", default="1,4,16,64")
parser.add_argument("--shapes", required=True, help="JSON list of the ResNet-50 gradient shapes")
parser.add_argument("--iters", type=int, default=5)
ARGS = parser.parse_args()

LOCAL = COMM.Split_type(MPI.COMM_TYPE_SHARED, key=COMM.rank)
CROSS = COMM.Split(LOCAL.rank, key=COMM.rank)
HOSTS = COMM.allgather(MPI.Get_processor_name())


def pingpong_ms(peer, nbytes, reps=5):
    """Half the median round trip between rank 0 and `peer` (others wait); -1 without such a peer."""
    if peer is None:
        return -1.0
    buf = np.zeros(max(nbytes, 1), np.uint8)
    times = []
    COMM.Barrier()
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        if COMM.rank == 0:
            COMM.Send(buf, dest=peer)
            COMM.Recv(buf, source=peer)
        elif COMM.rank == peer:
            COMM.Recv(buf, source=0)
            COMM.Send(buf, dest=0)
        times.append(time.perf_counter() - t0)
    COMM.Barrier()
    return COMM.bcast(1000 * float(np.median(times[1:])) / 2, root=0)


def probes():
    local_peer = next((r for r in range(1, COMM.size) if HOSTS[r] == HOSTS[0]), None)
    cross_peer = next((r for r in range(1, COMM.size) if HOSTS[r] != HOSTS[0]), None)
    out = []
    for nbytes in [8, 64 << 10, 1 << 20, 8 << 20, 32 << 20]:
        out.append({"bytes": nbytes, "shm_ms": pingpong_ms(local_peer, nbytes),
                    "cross_ms": pingpong_ms(cross_peer, nbytes)})
    return out


def raw_hierarchical(arr):
    LOCAL.Reduce(MPI.IN_PLACE if LOCAL.rank == 0 else arr, arr if LOCAL.rank == 0 else None, op=MPI.SUM, root=0)
    if LOCAL.rank == 0:
        CROSS.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM)
    LOCAL.Bcast(arr, root=0)


PIECE = 1 << 20  # floats per Sendrecv of raw_ring (4 MiB)


def raw_ring(arr, scratch):
    """Allreduce as a ring over Sendrecv (reduce-scatter, then allgather), in place: what tfring's ring.cc does for
    the cross-host step, here on the flat communicator, to see whether a ring of our own reaches a rate-limited
    link's speed where Open MPI's MPI_Allreduce does not (#47)."""
    p, me = COMM.size, COMM.rank
    if p == 1:
        return
    bounds = [arr.size * i // p for i in range(p + 1)]
    nxt, prv = (me + 1) % p, (me - 1) % p
    pieces = -(-max(bounds[i + 1] - bounds[i] for i in range(p)) // PIECE)
    for s in range(p - 1):  # step s sends this rank's partial sum of block me-s-1, adds into block me-s-2
        out, inn = (me - s - 1) % p, (me - s - 2) % p
        for k in range(pieces):
            a, b = bounds[out] + k * PIECE, bounds[inn] + k * PIECE
            send = arr[min(a, bounds[out + 1]):min(a + PIECE, bounds[out + 1])]
            n = max(0, min(b + PIECE, bounds[inn + 1]) - b)
            COMM.Sendrecv(send, nxt, recvbuf=scratch[:n], source=prv)
            arr[b:b + n] += scratch[:n]
    for s in range(p - 1):  # block me is complete: pass the complete blocks round
        out, inn = (me - s) % p, (me - s - 1) % p
        COMM.Sendrecv(arr[bounds[out]:bounds[out + 1]], nxt, recvbuf=arr[bounds[inn]:bounds[inn + 1]], source=prv)


def measure_tfring(rows, resnet, label):
    import tensorflow as tf
    import tfring as hvd
    hvd.init()
    for row in rows:
        x = tf.constant(np.ones(row["bytes"] // 4, np.float32))
        row[label + "_ms"] = median_ms(lambda: hvd.allreduce(x, op=hvd.Sum, name="scale"), ARGS.iters)
    tensors = [tf.constant(np.ones(s, np.float32)) for s in resnet["shapes"]]
    grouped = tf.function(lambda ts: hvd.grouped_allreduce(ts, op=hvd.Average))
    resnet[label + "_ms"] = median_ms(lambda: grouped(tensors), max(2, ARGS.iters // 2))
    hvd.shutdown()


def main():
    import json
    with open(ARGS.shapes) as f:
        shapes = [tuple(s) for s in json.load(f)]
    rows = [{"case": "allreduce %d MiB" % m, "bytes": m << 20} for m in map(int, ARGS.sizes_mib.split(","))]
    params = sum(int(np.prod(s)) for s in shapes)
    resnet = {"case": "ResNet-50 gradients (%d tensors)" % len(shapes), "bytes": params * 4, "shapes": shapes}
    result = {"np": COMM.size, "hosts": len(set(HOSTS)), "per_host": LOCAL.size, "probes": probes()}
    for row in rows + [resnet]:
        arr = np.ones(row["bytes"] // 4, np.float32)
        row["raw_ms"] = median_ms(lambda: COMM.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM), ARGS.iters)
        row["raw_hier_ms"] = median_ms(lambda: raw_hierarchical(arr), ARGS.iters)
        scratch = np.empty(PIECE, np.float32)
        row["raw_ring_ms"] = median_ms(lambda: raw_ring(arr, scratch), ARGS.iters)
    os.environ["TFRING_HIERARCHICAL_ALLREDUCE"] = "0"
    measure_tfring(rows, resnet, "flat")
    os.environ["TFRING_HIERARCHICAL_ALLREDUCE"] = "1"
    measure_tfring(rows, resnet, "hier")
    del resnet["shapes"]
    result["rows"] = rows + [resnet]
    if COMM.rank == 0:
        write_json(ARGS.out, result)


main()
