"""tfring.torch on real ranks: every collective x dtype x reduce op, scale factors, in-place and async variants,
grouped ops, join and barrier; each rank checks its own values."""
import os
import signal
import time

import pytest
import torch

import tfring.torch as hvd
from torch_helpers import ANY, NUMERIC, SHAPES, assert_close, cast, init, same, tensor, value

R, N = init()
REDUCERS = {hvd.Sum: lambda s: s.sum(0), hvd.Min: lambda s: s.min(0).values, hvd.Max: lambda s: s.max(0).values,
            hvd.Product: lambda s: s.prod(0)}
OPS = [hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product]


def expected_reduce(op, shape, dtype, ranks=None):
    stack = torch.stack([value(r, shape) for r in (range(N) if ranks is None else ranks)])
    if op == hvd.Average:
        total = stack.sum(0) / stack.shape[0]
        return total if dtype.is_floating_point else torch.trunc(total)
    return REDUCERS[op](stack)


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_allreduce(dtype, op):
    for shape in SHAPES:
        x = tensor(R, shape, dtype)
        out = hvd.allreduce(x, op=op)
        assert_close(out, expected_reduce(op, shape, dtype), dtype)
        assert same(x, tensor(R, shape, dtype))  # the input is not modified


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.float16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_ring_pairs_a_rank_in_place_with_one_out_of_place(dtype, op):
    # From 256 KiB tfring reduces with its own ring (ring.cc); whether a rank reduces in place is its own business
    # (a framework forwards one rank's input and not another's), so even ranks reduce in place and odd ones out of
    # place: the same calls, the same bits everywhere. 300007 elements: uneven blocks at np=2 and 3.
    shape = (300007,)
    x = tensor(R, shape, dtype)
    name = "ring_mixed_%s_%s" % (str(dtype), op)
    out = hvd.allreduce_(x, op=op, name=name) if R % 2 == 0 else hvd.allreduce(x, op=op, name=name)
    assert_close(out, expected_reduce(op, shape, dtype), dtype)
    if R % 2:
        assert same(x, tensor(R, shape, dtype))  # the input is not modified
    rows = hvd.allgather(out[None])
    assert all(torch.equal(rows[r], rows[0]) for r in range(N)), "ranks hold different bits"


def test_ring_with_a_joined_rank_and_scale_factors():
    # The last rank joins first: it reduces zeros in place in the fusion buffer while the others reduce out of
    # place; Average divides by the job's size, the joined rank included.
    shape, out = (300007,), None
    try:
        if R < N - 1:
            x = tensor(R, shape, torch.float32)
            out = hvd.allreduce(x, op=hvd.Average, prescale_factor=2.0, postscale_factor=0.5, name="ring_joined")
    finally:  # a failed rank still joins, or the joined one would wait for it
        last = hvd.join()
    assert last != N - 1 and hvd.allgather_object(last) == [last] * N
    if R < N - 1:
        want = expected_reduce(hvd.Sum, shape, torch.float64, ranks=range(N - 1)) / N
        torch.testing.assert_close(out.double(), want, rtol=2e-7, atol=0)


def test_allreduce_default_is_average_and_average_flag_is_deprecated():
    x = tensor(R, (4,), torch.float64)
    assert_close(hvd.allreduce(x), expected_reduce(hvd.Average, (4,), torch.float64), torch.float64)
    with pytest.warns(DeprecationWarning):
        out = hvd.allreduce(x, average=False)
    assert_close(out, expected_reduce(hvd.Sum, (4,), torch.float64), torch.float64)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_allreduce_scale_factors(dtype):
    x = tensor(R, (5, 2), dtype)
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert_close(out, expected_reduce(hvd.Sum, (5, 2), dtype), dtype)
    if dtype.is_floating_point:
        out = hvd.allreduce(x, op=hvd.Average, prescale_factor=3.0, postscale_factor=0.25)
        assert_close(out, 0.75 * expected_reduce(hvd.Average, (5, 2), dtype), dtype)


def test_allreduce_in_place_and_non_contiguous():
    x = tensor(R, (3, 4), torch.float32)
    assert hvd.allreduce_(x, op=hvd.Sum) is x
    assert_close(x, expected_reduce(hvd.Sum, (3, 4), torch.float32), torch.float32)
    # A transposed view is reduced through a contiguous copy, then written back into the view.
    base = tensor(R, (4, 3), torch.float32)
    view = base.t()
    assert not view.is_contiguous()
    assert hvd.allreduce_(view, op=hvd.Sum) is view
    assert_close(base, expected_reduce(hvd.Sum, (4, 3), torch.float32), torch.float32)
    view = tensor(R, (4, 3), torch.float32).t()
    assert_close(hvd.allreduce(view, op=hvd.Max), expected_reduce(hvd.Max, (4, 3), torch.float32).t(), torch.float32)


def test_async_poll_synchronize():
    x = tensor(R, (1000,), torch.float32)
    handles = [hvd.allreduce_async(x, name="async.%d" % i, op=hvd.Sum) for i in range(3)]
    handles.append(hvd.allreduce_async_(x.clone(), name="async.inplace", op=hvd.Sum))
    for h in handles:
        while not hvd.poll(h):
            time.sleep(0.001)
        assert hvd.poll(h)  # stays done until synchronized
    for h in handles:
        assert_close(hvd.synchronize(h), expected_reduce(hvd.Sum, (1000,), torch.float32), torch.float32)
    assert hvd.synchronize(handles[0]) is None  # already synchronized (Horovod returns None)
    with pytest.raises(ValueError, match="handle"):
        hvd.poll(handles[0])


def test_wait_is_interruptible_and_the_handle_survives():
    # Rank 0 waits for a collective the others submit only after a barrier it has not entered: a signal handler's
    # exception (Ctrl-C's KeyboardInterrupt alike) ends the wait, and the handle can be synchronized later.
    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted()
    if R == 0:
        h = hvd.allreduce_async(torch.ones(2), name="late", op=hvd.Sum)
        old = signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        try:
            with pytest.raises(Interrupted):
                hvd.synchronize(h)
        finally:
            signal.signal(signal.SIGALRM, old)
        assert not hvd.poll(h)
        hvd.barrier()
        assert hvd.synchronize(h).tolist() == [N, N]
    else:
        hvd.barrier()
        assert hvd.allreduce(torch.ones(2), name="late", op=hvd.Sum).tolist() == [N, N]


def test_grouped_allreduce_mixed_dtypes_and_in_place():
    xs = [tensor(R, (3,), torch.float32), tensor(R, (2, 2), torch.int32), tensor(R, (), torch.float64),
          tensor(R, (300, 1000), torch.float32), tensor(R, (5,), torch.bfloat16)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name="grouped")
    assert isinstance(outs, list) and len(outs) == len(xs)
    for x, out in zip(xs, outs):
        assert_close(out, expected_reduce(hvd.Sum, tuple(x.shape), x.dtype), x.dtype)
    outs = hvd.synchronize(hvd.grouped_allreduce_async(xs[:2], op=hvd.Max))
    assert_close(outs[1], expected_reduce(hvd.Max, (2, 2), torch.int32), torch.int32)
    ys = [t.clone() for t in xs[:3]] + [tensor(R, (3, 2), torch.float64).t()]
    res = hvd.grouped_allreduce_(ys, op=hvd.Average, prescale_factor=2.0, postscale_factor=0.5)
    assert all(a is b for a, b in zip(res, ys))
    for y in ys[:3]:
        assert_close(y, expected_reduce(hvd.Average, tuple(y.shape), y.dtype), y.dtype)
    assert_close(ys[3], expected_reduce(hvd.Average, (3, 2), torch.float64).t(), torch.float64)


def test_compression_fp16():
    x = tensor(R, (6,), torch.float32) / 4
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert_close(out, expected_reduce(hvd.Sum, (6,), torch.float32) / 4, torch.float32)
    outs = hvd.grouped_allreduce([x, x.double()], op=hvd.Sum, compression=hvd.Compression.fp16)
    assert [o.dtype for o in outs] == [torch.float32, torch.float64]


@pytest.mark.parametrize("kind,half,spacing", [("fp16", torch.float16, 2.0 ** -10),
                                                ("bf16", torch.bfloat16, 2.0 ** -7)])
def test_compression_goes_through_16_bits(kind, half, spacing):
    # 1 + k * 2**-12 has no 16-bit representation (the spacing at 1: fp16 2**-10, bf16 2**-7): compressed, the
    # sum travels in 16 bits and comes back exactly representable there; uncompressed it is the exact fp32 sum,
    # which is not. Guards against a compressor that is accepted but never applied (the k/4 values above are exact).
    x = torch.full((4,), 1.0 + (R + 1) * 2.0 ** -12)
    exact = sum(1.0 + (r + 1) * 2.0 ** -12 for r in range(N))
    plain = hvd.allreduce(x, op=hvd.Sum, name=kind + ".plain")
    assert plain.tolist() == [exact] * 4
    assert plain.to(half).float().tolist() != plain.tolist()  # the exact sum needs more than 16 bits
    compression = getattr(hvd.Compression, kind)
    for out in [hvd.allreduce(x, op=hvd.Sum, compression=compression, name=kind + ".one")] + \
            hvd.grouped_allreduce([x, x.clone()], op=hvd.Sum, compression=compression, name=kind + ".grouped"):
        assert out.dtype == torch.float32
        assert out.to(half).float().tolist() == out.tolist(), out  # came through 16 bits
        assert torch.allclose(out, plain, atol=N * 2 * spacing), (out, plain)


@pytest.mark.skipif(N & (N - 1) != 0, reason="Adasum needs a power-of-two number of ranks")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_adasum(dtype):
    equal = torch.tensor([1.0, 2.0, 3.0], dtype=dtype)
    ortho = torch.zeros(N, dtype=dtype)
    ortho[R] = R + 1.0
    # Parallel equal vectors combine to the vector, orthogonal ones add.
    assert_close(hvd.allreduce(equal, op=hvd.Adasum), equal.double(), dtype)
    a, b = hvd.grouped_allreduce([equal, ortho], op=hvd.Adasum)
    assert_close(a, equal.double(), dtype)
    assert_close(b, torch.arange(1.0, N + 1, dtype=torch.float64), dtype)


def test_sparse_allreduce_async():
    idx = torch.tensor([[R, N]])
    sparse = torch.sparse_coo_tensor(idx, torch.tensor([1.0, float(R)]), (N + 1,), check_invariants=True)
    dense = hvd.sparse_allreduce_async(sparse, name="sparse", op=hvd.Sum)().to_dense()
    expected = torch.ones(N + 1, dtype=torch.float32)
    expected[N] = sum(range(N))
    torch.testing.assert_close(dense, expected)


@pytest.mark.parametrize("dtype", ANY, ids=str)
def test_allgather_different_first_dims(dtype):
    x = tensor(R, (R, 2, 3), dtype)  # rank 0 contributes no rows
    out = hvd.allgather(x)
    assert_close(out, torch.cat([cast(value(r, (r, 2, 3)), dtype) for r in range(N)]), dtype)
    scalar = hvd.allgather(tensor(R, (), dtype))  # a scalar gathers like shape [1]
    assert_close(scalar, torch.cat([cast(value(r, (1,)), dtype) for r in range(N)]), dtype)


def test_grouped_allgather():
    shapes = [lambda r: (r + 1,), lambda r: (1, 4), lambda r: (2 * r + 1, 2)]
    dtypes = [torch.int64, torch.bool, torch.float16]
    xs = [tensor(R, shape(R), dtype) for shape, dtype in zip(shapes, dtypes)]
    outs = hvd.synchronize(hvd.grouped_allgather_async(xs))
    outs2 = hvd.grouped_allgather(xs, name="grouped_allgather")
    for shape, dtype, out, out2 in zip(shapes, dtypes, outs, outs2):
        assert_close(out, torch.cat([tensor(r, shape(r), dtype) for r in range(N)]), dtype)
        assert same(out, out2)


@pytest.mark.parametrize("dtype", ANY, ids=str)
def test_broadcast_every_root(dtype):
    for root in range(N):
        x = tensor(R, (2, 3), dtype)
        assert_close(hvd.broadcast(x, root), tensor(root, (2, 3), dtype), dtype)
        assert same(x, tensor(R, (2, 3), dtype))
        assert hvd.broadcast_(x, root_rank=root, name="bcast_inplace") is x
        assert_close(x, tensor(root, (2, 3), dtype), dtype)


def test_broadcast_async_and_non_contiguous():
    h = hvd.broadcast_async(tensor(R, (4,), torch.float32), N - 1)
    assert_close(hvd.synchronize(h), tensor(N - 1, (4,), torch.float32), torch.float32)
    base = tensor(R, (3, 2), torch.int32)
    view = base.t()
    assert hvd.synchronize(hvd.broadcast_async_(view, 0)) is view
    assert same(base, tensor(0, (3, 2), torch.int32))


def rows(sender, dest, count, dtype):
    """What `sender` sends to `dest`: `count` rows of 2 tagged with both ranks."""
    return cast(torch.full((count, 2), float(sender * 3 + dest + 1), dtype=torch.float64), dtype)


@pytest.mark.parametrize("dtype", ANY, ids=str)
def test_alltoall(dtype):
    # Even split, no splits given: only the output (as Horovod).
    x = torch.cat([rows(R, d, 2, dtype) for d in range(N)])
    out = hvd.alltoall(x)
    assert isinstance(out, torch.Tensor)
    assert_close(out, torch.cat([rows(s, R, 2, dtype) for s in range(N)]), dtype)
    # Rank r sends d + 1 rows to rank d: every rank receives r + 1 rows from each sender.
    x = torch.cat([rows(R, d, d + 1, dtype) for d in range(N)])
    for splits in ([d + 1 for d in range(N)], torch.arange(1, N + 1, dtype=torch.int32), torch.arange(1, N + 1)):
        out, received = hvd.alltoall(x, splits=splits)
        assert_close(out, torch.cat([rows(s, R, R + 1, dtype) for s in range(N)]), dtype)
        assert received.dtype == torch.int32 and received.tolist() == [R + 1] * N


def test_alltoall_async_returns_output_and_received_splits():
    x = torch.cat([rows(R, d, 1 if d != R else 0, torch.float32) for d in range(N)])  # nothing to itself
    splits = [1 if d != R else 0 for d in range(N)]
    out, received = hvd.synchronize(hvd.alltoall_async(x, splits=splits, name="a2a"))
    assert_close(out, torch.cat([rows(s, R, 1, torch.float32) for s in range(N) if s != R]), torch.float32)
    assert received.tolist() == splits


def split_rows(full, n=N, me=R):
    """Rank me's block of rows: the first dim0 % n ranks get one row more."""
    counts = [full.shape[0] // n + (1 if i < full.shape[0] % n else 0) for i in range(n)]
    start = sum(counts[:me])
    return full[start:start + counts[me]]


def expected_scatter(op, shape, dtype):
    return split_rows(expected_reduce(op, shape, dtype))


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_reducescatter(dtype, op):
    for shape in [(2 * N, 3), (2 * N + 1, 2), (N - 1,), (1, 2, 2)]:  # uneven rows: the first ranks get one more
        out = hvd.reducescatter(tensor(R, shape, dtype), op=op)
        assert_close(out, expected_scatter(op, shape, dtype), dtype)


def test_reducescatter_scales_async_and_grouped():
    x = tensor(R, (N * 3, 2), torch.float32)
    out = hvd.synchronize(hvd.reducescatter_async(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0))
    assert_close(out, 1.5 * expected_scatter(hvd.Sum, (N * 3, 2), torch.float32), torch.float32)
    y = tensor(R, (N + 2,), torch.int64)
    z = tensor(R, (N, 2), torch.float64).t()  # non-contiguous, 2 rows
    outs = hvd.grouped_reducescatter([x, y, z], op=hvd.Sum, name="grouped_rs")
    assert_close(outs[0], expected_scatter(hvd.Sum, (N * 3, 2), torch.float32), torch.float32)
    assert_close(outs[1], expected_scatter(hvd.Sum, (N + 2,), torch.int64), torch.int64)
    assert_close(outs[2], split_rows(expected_reduce(hvd.Sum, (N, 2), torch.float64).t()), torch.float64)
    outs = hvd.synchronize(hvd.grouped_reducescatter_async([x, y], op=hvd.Average))
    assert_close(outs[0], expected_scatter(hvd.Average, (N * 3, 2), torch.float32), torch.float32)
    assert_close(outs[1], expected_scatter(hvd.Average, (N + 2,), torch.int64), torch.int64)


def test_barrier_orders_ranks():
    token = hvd.broadcast(torch.randint(0, 2 ** 62, (1,)), 0, name="barrier_token").item()
    path = os.path.join("/tmp", "tfring-torch-barrier-%d" % token)
    if R == 0:
        time.sleep(0.3)  # without a barrier the other ranks would look before the file exists
        with open(path, "w") as f:
            f.write("x")
    hvd.barrier()
    assert os.path.exists(path)
    hvd.barrier()
    if R == 0:
        os.remove(path)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_join_uneven_ranks(op):
    # Rank r runs r + 1 unnamed allreduces, then joins; joined ranks contribute zeros and Average divides by the
    # job's size (Horovod's test_horovod_join_allreduce: a joined rank counts).
    for i in range(R + 1):
        out = hvd.allreduce(torch.full((3,), float(R + 1)), op=op)
        live = list(range(i, N))
        total = float(sum(r + 1 for r in live))
        expected = torch.full((3,), total if op == hvd.Sum else total / N)
        assert torch.equal(out, expected), (i, out)
    assert hvd.join() == N - 1  # the busiest rank joins last
    # Unnamed collectives are numbered alike again on every rank after join.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64], ids=str)
def test_join_average_counts_the_joined_ranks_zeros(dtype):
    # Horovod's test_horovod_join_allreduce: one rank joins first; the others' Average divides by the job's size
    # (integers truncated toward zero); join returns the last rank to join, the same on every rank.
    for first in range(N):
        if R == first:
            last = hvd.join()
        else:
            x = torch.tensor([-75, 75, 7, 0], dtype=dtype)
            out = hvd.allreduce(x, op=hvd.Average, name="join_average")
            total = x * (N - 1)
            expected = total / N if dtype.is_floating_point else total.div(N, rounding_mode="trunc")
            assert torch.equal(out, expected), (R, first, out, expected)
            last = hvd.join()
        assert last != first
        assert hvd.allgather_object(last) == [last] * N


def test_join_with_allgather_fails_on_running_ranks():
    if R == 0:
        last = hvd.join()
    else:
        with pytest.raises(RuntimeError, match="join"):
            hvd.allgather(torch.ones(2), name="allgather_while_joined")
        last = hvd.join()
    assert last != 0  # rank 0 joined first: the others join after their allgather failed
    gathered = hvd.allgather(torch.tensor([last]))
    assert gathered.tolist() == [last] * N
