"""tfring.mxnet collectives on real ranks: every dtype and shape, every reduce op, values checked on every rank."""
import mxnet as mx
import numpy as np
import pytest

import tfring.mxnet as hvd
from mx_helpers import ANY, FLOATS, NUMERIC, SHAPES, array, assert_close, cast, init, value

REDUCE = {hvd.Sum: np.sum, hvd.Min: np.min, hvd.Max: np.max, hvd.Product: np.prod}


def expected_reduce(op, shape, size):
    stack = np.stack([value(r, shape) for r in range(size)])
    if op == hvd.Average:
        return stack.mean(axis=0)
    return REDUCE[op](stack, axis=0)


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Min, hvd.Max, hvd.Product])
def test_allreduce_ops(dtype, shape, op):
    rank, size = init()
    x = array(rank, shape, dtype)
    before = x.asnumpy().copy()
    # Distinct per shape: reading an empty result does not wait for MXNet's engine, so a (0,) op may still run.
    out = hvd.allreduce(x, op=op, name="ops_%s_%s_%d" % (np.dtype(dtype).name, shape, op))
    assert_close(out, expected_reduce(op, shape, size), dtype)
    np.testing.assert_array_equal(x.asnumpy(), before)  # the input is not modified


@pytest.mark.parametrize("dtype", FLOATS)
def test_allreduce_average_and_scaling(dtype):
    rank, size = init()
    x = array(rank, (2, 3), dtype)
    assert_close(hvd.allreduce(x), expected_reduce(hvd.Average, (2, 3), size), dtype)
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert_close(out, expected_reduce(hvd.Sum, (2, 3), size), dtype)
    assert_close(hvd.allreduce(x, average=False), expected_reduce(hvd.Sum, (2, 3), size), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_prescale_and_postscale_are_applied(dtype):
    # Factors that do not cancel (2.0 x 0.5 would): a scale dropped anywhere changes the result.
    rank, size = init()
    x = array(rank, (2, 3), dtype)
    want = expected_reduce(hvd.Sum, (2, 3), size)
    assert_close(hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0), 3.0 * want, dtype)
    assert_close(hvd.allreduce(x, op=hvd.Sum, postscale_factor=0.25), 0.25 * want, dtype)
    assert_close(hvd.allreduce(x, op=hvd.Average, prescale_factor=2.0, postscale_factor=0.75),
                 1.5 * expected_reduce(hvd.Average, (2, 3), size), dtype)
    y = array(rank, (4,), dtype)
    hvd.grouped_allreduce_([y], op=hvd.Sum, prescale_factor=0.5)
    assert_close(y, 0.5 * expected_reduce(hvd.Sum, (4,), size), dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_average_truncates(dtype):
    # Horovod's integer Average: the sum divided by the ranks, truncated (75 and 0 average to 37).
    rank, size = init()
    x = mx.nd.array([75 if rank == 0 else 0, 7 * (rank + 1), -5 * (rank + 1)], dtype=dtype)
    total = np.array([75, 7 * size * (size + 1) // 2, -5 * size * (size + 1) // 2], dtype=np.float64)
    assert_close(hvd.allreduce(x, op=hvd.Average, name="int_average_%s" % np.dtype(dtype).name),
                 np.trunc(total / size), dtype)


@pytest.mark.parametrize("dtype", NUMERIC)
def test_allreduce_in_place_and_chained(dtype):
    rank, size = init()
    x = array(rank, (4,), dtype)
    assert hvd.allreduce_(x, op=hvd.Sum) is x
    # A second in-place op on the same array is ordered after the first by MXNet's engine.
    hvd.allreduce_(x, op=hvd.Max)
    assert_close(x, expected_reduce(hvd.Sum, (4,), size), dtype)
    y = x * 1  # an MXNet operator reading the result waits for the allreduce
    assert_close(y, expected_reduce(hvd.Sum, (4,), size), dtype)


def test_engine_orders_writes_before_allreduce():
    rank, size = init()
    x = mx.nd.zeros((1000,))
    x[:] = rank + 1  # pending write: the allreduce must see it
    x += 1
    out = hvd.allreduce(x, op=hvd.Sum)
    x[:] = -100  # written after the push: must not leak into the result
    np.testing.assert_allclose(out.asnumpy(), np.full(1000, sum(r + 2 for r in range(size))))


def test_many_async_allreduces():
    rank, size = init()
    outs = [hvd.allreduce(mx.nd.full((i + 1,), rank + i), op=hvd.Sum) for i in range(50)]
    for i, o in enumerate(outs):
        np.testing.assert_allclose(o.asnumpy(), np.full(i + 1, sum(r + i for r in range(size))))


@pytest.mark.parametrize("dtype", NUMERIC)
def test_grouped_allreduce(dtype):
    rank, size = init()
    xs = [array(rank, s, dtype) for s in SHAPES]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    for o, s in zip(outs, SHAPES):
        assert_close(o, expected_reduce(hvd.Sum, s, size), dtype)
    assert hvd.grouped_allreduce_(xs, op=hvd.Max) == xs
    for x, s in zip(xs, SHAPES):
        assert_close(x, expected_reduce(hvd.Max, s, size), dtype)


@pytest.mark.parametrize("dtype", ANY)
@pytest.mark.parametrize("shape", SHAPES)
def test_broadcast(dtype, shape):
    rank, size = init()
    for root in range(size):
        x = array(rank, shape, dtype)
        out = hvd.broadcast(x, root)
        assert_close(out, cast(value(root, shape), dtype), dtype)
        assert_close(x, cast(value(rank, shape), dtype), dtype)
        # A fixed name may be reused once the op is done: reading x waits for it (empty arrays: waitall).
        assert hvd.broadcast_(x, root, name="bcast_inplace") is x
        assert_close(x, cast(value(root, shape), dtype), dtype)
        mx.nd.waitall()


@pytest.mark.parametrize("dtype", ANY)
def test_allgather_uneven(dtype):
    rank, size = init()
    x = array(rank, (rank + 1, 2), dtype)
    out = hvd.allgather(x)
    expected = np.concatenate([cast(value(r, (r + 1, 2)), dtype) for r in range(size)])
    assert_close(out, expected, dtype)


@pytest.mark.parametrize("dtype", NUMERIC)
def test_grouped_allgather(dtype):
    rank, size = init()
    xs = [array(rank, (rank + 1,), dtype), array(rank, (2, 3), dtype)]
    outs = hvd.grouped_allgather(xs)
    assert_close(outs[0], np.concatenate([value(r, (r + 1,)) for r in range(size)]), dtype)
    assert_close(outs[1], np.concatenate([value(r, (2, 3)) for r in range(size)]), dtype)


@pytest.mark.parametrize("dtype", ANY)
def test_alltoall(dtype):
    rank, size = init()
    # Rank r sends (j + 1) rows to rank j; row values encode the sender.
    splits = [j + 1 for j in range(size)]
    x = mx.nd.array(cast(np.full((sum(splits), 2), rank + 1.0), dtype), dtype=dtype)
    out, received = hvd.alltoall(x, splits=splits)
    assert received.asnumpy().tolist() == [rank + 1] * size
    expected = np.concatenate([cast(np.full((rank + 1, 2), r + 1.0), dtype) for r in range(size)])
    assert_close(out, expected, dtype)
    even = hvd.alltoall(mx.nd.array(cast(np.full((2 * size,), rank + 1.0), dtype), dtype=dtype))
    assert_close(even, np.repeat(cast(np.arange(1.0, size + 1), dtype), 2), dtype)


@pytest.mark.parametrize("dtype", NUMERIC)
def test_reducescatter(dtype):
    rank, size = init()
    rows = 2 * size + 1  # uneven: earlier ranks get one more row
    x = array(rank, (rows, 2), dtype)
    out = hvd.reducescatter(x, op=hvd.Sum)
    full = expected_reduce(hvd.Sum, (rows, 2), size)
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    start = sum(counts[:rank])
    assert_close(out, full[start:start + counts[rank]], dtype)


def test_topology():
    rank, size = init()
    assert 0 <= hvd.local_rank() < hvd.local_size() <= size
    assert hvd.mpi_built() and hvd.mpi_enabled() and not hvd.nccl_built()


@pytest.mark.parametrize("dtype", FLOATS)
def test_grouped_reducescatter(dtype):
    rank, size = init()
    xs = [array(rank, (size, 2), dtype), array(rank, (2 * size,), dtype)]
    outs = hvd.grouped_reducescatter(xs, op=hvd.Average)
    for o, shape in zip(outs, [(size, 2), (2 * size,)]):
        full = expected_reduce(hvd.Average, shape, size)
        rows = shape[0] // size
        assert_close(o, full[rank * rows:(rank + 1) * rows], dtype)


def test_objects():
    rank, size = init()
    assert hvd.broadcast_object({"from": rank, "data": list(range(rank + 3))}, root_rank=size - 1) == \
        {"from": size - 1, "data": list(range(size + 2))}
    assert hvd.allgather_object(("rank", rank) * (rank + 1)) == [("rank", r) * (r + 1) for r in range(size)]


def test_mkldnn_layout_inputs():
    # Convolution outputs are in an MKL-DNN layout in this mxnet build: they must reach the engine op converted,
    # without the op waiting on itself. (Weights an inference forward reordered can still hang: see README.)
    rank, size = init()
    net = mx.gluon.nn.Conv2D(8, 3, in_channels=4)
    net.initialize(mx.init.One())
    y = net(mx.nd.ones((1, 4, 6, 6)) * (rank + 1))  # every output: 4 * 3 * 3 * (rank + 1) (bias 0)
    out = hvd.allreduce(y, op=hvd.Sum)
    np.testing.assert_allclose(out.asnumpy(), np.full((1, 8, 4, 4), 36.0 * sum(r + 1 for r in range(size))))
    hvd.allreduce_(y, op=hvd.Max)
    np.testing.assert_allclose(y.asnumpy(), 36.0 * size)
