"""Rank side of the hierarchical-collective tests (tests/hosts/test_multihost.py runs it across emulated hosts with
TFRING_HIERARCHICAL_ALLREDUCE/ALLGATHER=1). Every rank checks every value against what the flat collectives give:
bitwise for integers, within float tolerance otherwise. HOST_OF lists each rank's host, as the launch placed it.
Through tfring.torch: the hierarchical paths are the core's, the same for every binding, and torch's import costs
each of the 4 ranks a third of TensorFlow's."""
import json
import os
import socket

import numpy as np
import pytest
import torch

import tfring.torch as hvd

SUBSET = hvd.ProcessSet([0, 1, 3])  # spans both hosts, with two ranks on one of them, in every layout used
HOST_OF = [int(h) for h in os.environ["HOST_OF"].split(",")]
# Each host's first rank: no host holds two of them, so the set reduces flat, and each of its ranks has a host's
# cores to itself, so from 256 KiB it takes tfring's ring (ring.cc; 3 ranks on three hosts, 2 on two), which the
# suite's one-machine launches never take (fewer cores than ranks).
HEADS = hvd.ProcessSet(sorted({HOST_OF.index(h) for h in HOST_OF}))
hvd.init(process_sets=[SUBSET, HEADS])
R, N = hvd.rank(), hvd.size()


def T(x):
    return torch.from_numpy(np.ascontiguousarray(x))


def inputs(dtype, n, rank):
    """A rank-dependent tensor whose exact sum/min/max/product the test can compute for every rank."""
    base = np.arange(n, dtype=np.int64) % 251
    if np.dtype(dtype).kind == "f":
        return ((base + 1) * (rank + 1) / 7.0).astype(dtype)
    return ((base * (rank + 3) + rank * 97) % (np.iinfo(dtype).max // 2 + 1)).astype(dtype)


def test_topology_is_the_hosts():
    assert socket.gethostname() == "h%d" % (HOST_OF[R] + 1)
    mine = [r for r in range(N) if HOST_OF[r] == HOST_OF[R]]
    assert (hvd.local_size(), hvd.local_rank()) == (len(mine), mine.index(R))
    assert hvd.cross_size() == (len(set(HOST_OF)) if hvd.local_rank() == 0 else
                                sum(1 for h in set(HOST_OF) if HOST_OF.count(h) > hvd.local_rank()))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int8, np.int16, np.float32, np.float64,
                                   np.float16])
@pytest.mark.parametrize("n", [1, 3, 1001, 300000])  # fewer elements than a host's ranks; odd shards; direct path
def test_allreduce_sum_matches_flat(dtype, n):
    got = hvd.allreduce(T(inputs(dtype, n, R)), op=hvd.Sum, name="sum_%s_%d" % (np.dtype(dtype).name, n))
    if np.dtype(dtype).kind in "iu":  # integer sums wrap the same in any order: bitwise equal
        want = sum(inputs(dtype, n, r).astype(np.int64) for r in range(N)).astype(dtype)
        np.testing.assert_array_equal(got.numpy(), want)
    else:
        want = sum(inputs(dtype, n, r).astype(np.float64) for r in range(N))
        np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=2e-3 if dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("op,fn", [(hvd.Min, np.min), (hvd.Max, np.max), (hvd.Product, np.prod)])
def test_allreduce_min_max_product(op, fn):
    stack = np.stack([inputs(np.int64, 999, r) % 5 + 1 for r in range(N)])
    got = hvd.allreduce(T(stack[R]), op=op)
    np.testing.assert_array_equal(got.numpy(), fn(stack, axis=0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("n", [1, 3, 1001, 300000])
@pytest.mark.parametrize("subset", [False, True], ids=["global", "subset"])
def test_average_and_scales_match_flat(dtype, n, subset):
    # Each rank divides only the shard it reduced (or the host root the whole host's sum): every element must come
    # out scaled and divided exactly once, by the set's size, on every rank.
    ranks = SUBSET.ranks if subset else list(range(N))
    if R not in ranks:
        return
    floats = np.dtype(dtype).kind == "f"
    scales = dict(prescale_factor=2.0, postscale_factor=3.0) if floats else {}
    got = hvd.allreduce(T(inputs(dtype, n, R)), op=hvd.Average, process_set=SUBSET if subset else None,
                        name="avg_%s_%d_%d" % (np.dtype(dtype).name, n, subset), **scales).numpy()
    total = sum(inputs(dtype, n, r).astype(np.float64 if floats else np.int64) for r in ranks)
    if floats:
        rtol = 2e-3 if dtype == np.float16 else 1e-6
        np.testing.assert_allclose(got.astype(np.float64), 6.0 * total / len(ranks), rtol=rtol)
    else:  # integer Average truncates toward zero; the sums here are positive
        np.testing.assert_array_equal(got, (total // len(ranks)).astype(dtype))


def test_grouped_allreduce_fused():
    shapes = [[3], [17, 2], [1], [1000]]
    xs = [T(inputs(np.int32, int(np.prod(s)), R + i).reshape(s)) for i, s in enumerate(shapes)]
    got = hvd.grouped_allreduce(xs, op=hvd.Sum)
    for i, (s, g) in enumerate(zip(shapes, got)):
        want = sum(inputs(np.int32, int(np.prod(s)), r + i).astype(np.int64) for r in range(N)).astype(np.int32)
        np.testing.assert_array_equal(g.numpy(), want.reshape(s))


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.uint8])
def test_allgather_rank_order_with_uneven_rows(dtype):
    rows = lambda r: (r * 2 + 1) if r != 1 else 0  # noqa: E731  rank 1 contributes no rows
    mine = np.full([rows(R), 3], R + 1, dtype=dtype) + np.arange(3, dtype=dtype)
    got = hvd.allgather(T(mine)).numpy()
    want = np.concatenate([np.full([rows(r), 3], r + 1, dtype=dtype) + np.arange(3, dtype=dtype) for r in range(N)])
    np.testing.assert_array_equal(got, want)


def test_allgather_large():
    mine = np.full([50000, 4], R, dtype=np.float32)
    got = hvd.allgather(T(mine)).numpy()
    np.testing.assert_array_equal(got[:, 0], np.repeat(np.arange(N, dtype=np.float32), 50000))


def test_process_set_across_hosts():
    if R not in SUBSET.ranks:
        assert not SUBSET.included()
        return
    got = hvd.allreduce(T(inputs(np.int64, 513, R)), op=hvd.Sum, process_set=SUBSET)
    want = sum(inputs(np.int64, 513, r) for r in SUBSET.ranks)
    np.testing.assert_array_equal(got.numpy(), want)
    got = hvd.allgather(T([[R] * 2] * (R + 1)), process_set=SUBSET).numpy()
    np.testing.assert_array_equal(got[:, 0], np.repeat(SUBSET.ranks, [r + 1 for r in SUBSET.ranks]))


def test_timeline_shows_the_hierarchical_path():
    """The values above would also be right on the flat path: rank 0's timeline shows which one ran."""
    path = os.environ["TL_PATH"]
    hvd.allreduce(torch.ones([10]), name="tl_probe")
    hvd.allgather(torch.ones([2, 2]), name="tl_probe_gather")
    hvd.stop_timeline()
    if R != 0:
        return
    with open(path) as f:
        events = json.load(f)
    names = {e.get("name") for e in events}
    assert "MPI_HIERARCHICAL_ALLREDUCE" in names and "MPI_HIERARCHICAL_ALLGATHER" in names, sorted(
        n for n in names if n)
    assert "MPI_ALLREDUCE" not in names


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum, hvd.Max])
def test_ring_of_host_heads_in_and_out_of_place(dtype, op):
    # The set's even members reduce in place (allreduce_), the odd ones out of place: the ring makes the same calls
    # either way; every member ends with the same bits, and the out-of-place input is left as it was.
    try:
        if R in HEADS.ranks:
            _reduce_as_a_head(dtype, op)
    finally:
        hvd.barrier()  # the other ranks wait: a rank at the file's end would shut tfring down


def _reduce_as_a_head(dtype, op):
    n, me = 300001, HEADS.ranks.index(R)
    x = T(inputs(dtype, n, R))
    name = "heads_%s_%s" % (np.dtype(dtype).name, op)
    out = hvd.allreduce_(x, op=op, process_set=HEADS, name=name) if me % 2 == 0 else \
        hvd.allreduce(x, op=op, process_set=HEADS, name=name)
    stack = np.stack([inputs(dtype, n, r).astype(np.float64) for r in HEADS.ranks])
    want = stack.max(0) if op == hvd.Max else stack.sum(0) / (len(HEADS.ranks) if op == hvd.Average else 1)
    if np.dtype(dtype).kind == "i":
        want = np.trunc(want)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=1e-6)
    if me % 2:
        np.testing.assert_array_equal(x.numpy(), inputs(dtype, n, R))
    rows = hvd.allgather(out[None], process_set=HEADS)
    assert all(torch.equal(rows[k], rows[0]) for k in range(len(HEADS.ranks))), "members hold different bits"
    if op == hvd.Average and np.dtype(dtype).kind == "f":
        # The division rides in the ring's last step: the bits of the same ring's Sum, then divided.
        total = hvd.allreduce(T(inputs(dtype, n, R)), op=hvd.Sum, process_set=HEADS, name=name + "_sum").numpy()
        np.testing.assert_array_equal(out.numpy(), total / dtype(len(HEADS.ranks)))
