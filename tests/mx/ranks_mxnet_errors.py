"""tfring.mxnet process sets and errors on real ranks. Runs last: it ends with a shutdown and a fresh init."""
import mxnet as mx
import numpy as np
import pytest

import tfring.mxnet as hvd
from mx_helpers import init


def test_process_set_collectives():
    rank, size = init()
    evens = hvd.add_process_set(list(range(0, size, 2)))
    try:
        x = mx.nd.full((3,), rank + 1.0)
        if evens.included():
            out = hvd.allreduce(x, op=hvd.Sum, process_set=evens)
            np.testing.assert_allclose(out.asnumpy(), sum(r + 1.0 for r in range(0, size, 2)))
            gathered = hvd.allgather(x, process_set=evens).asnumpy()
            assert gathered.shape == (3 * evens.size(),)
            root = max(evens.ranks)  # root_rank is a global rank (Horovod's meaning)
            b = hvd.broadcast(x, root_rank=root, process_set=evens)
            np.testing.assert_allclose(b.asnumpy(), root + 1.0)
        else:
            with pytest.raises(ValueError):
                hvd.allreduce(x, process_set=evens)
            with pytest.raises(ValueError):
                hvd.allgather(x, process_set=evens)
        mx.nd.waitall()
    finally:
        hvd.remove_process_set(evens)


def test_local_argument_errors():
    init()
    x = mx.nd.ones((2,))
    with pytest.raises(ValueError, match="not supported"):
        hvd.allreduce(x, op=hvd.Adasum)
    with pytest.raises(ValueError, match="bool"):
        hvd.allreduce(mx.nd.ones((2,), dtype=np.bool_))
    with pytest.raises(ValueError, match="not both"):
        hvd.allreduce(x, average=True, op=hvd.Sum)
    with pytest.raises(TypeError, match="NDArray"):
        hvd.allreduce(np.ones(2))
    with pytest.raises(ValueError, match="empty"):
        hvd.grouped_allreduce([])
    with pytest.raises(ValueError, match="sparse"):
        hvd.allreduce(mx.nd.ones((2, 2)).tostype("csr"))


def test_mismatch_on_engine_path_raises_when_read():
    rank, size = init()
    out = hvd.allreduce(mx.nd.ones((rank + 1,)), name="mismatch")  # returns at once: the engine runs it
    with pytest.raises(mx.base.MXNetError, match="shape|mismatch"):
        out.asnumpy()
    bad = hvd.broadcast(mx.nd.ones((2,)), root_rank=size + 5, name="badroot")
    with pytest.raises(mx.base.MXNetError):
        bad.asnumpy()
    # The runtime is still usable afterwards.
    np.testing.assert_allclose(hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum).asnumpy(), size)


def test_mismatch_on_host_path_raises():
    rank, size = init()
    with pytest.raises(RuntimeError):
        hvd.allgather(mx.nd.ones((1, rank + 1)), name="gather_mismatch")
    with pytest.raises((ValueError, RuntimeError)):
        hvd.alltoall(mx.nd.ones((size,)), splits=[size + 1] + [0] * (size - 1), name="bad_splits")


def assert_argument_error(excinfo, *words):
    """Horovod's mxnet raises MXNetError for a bad argument, its Python checks and tfring ValueError: both."""
    assert isinstance(excinfo.value, mx.base.MXNetError) and isinstance(excinfo.value, ValueError), excinfo.value
    for word in words:
        assert word in str(excinfo.value), (word, str(excinfo.value))


def test_alltoall_bad_splits_raise_on_every_rank():
    rank, size = init()
    # No splits: the first dimension must divide by the ranks.
    with pytest.raises(mx.base.MXNetError) as e:
        hvd.alltoall(mx.nd.ones((size + 1,)), name="split_length")
    assert_argument_error(e, "splits", "first dimension %d" % (size + 1), "%d ranks" % size)
    # Splits adding up to more than the first dimension (Horovod's test: an int32 NDArray of ones).
    with pytest.raises(ValueError) as e:
        hvd.alltoall(mx.nd.ones((size - 1,)), mx.nd.ones((size,), dtype=np.int32), name="split_sum")
    assert_argument_error(e, "splits summing to %d" % size, "first dimension is %d" % (size - 1))
    # Only the last rank's splits are wrong: every rank raises (negotiation finds it), naming that rank.
    splits = [1] * size if rank != size - 1 else [2] * size
    with pytest.raises(ValueError) as e:
        hvd.alltoall(mx.nd.ones((size, 2)), splits=splits, name="split_one_rank")
    assert_argument_error(e, "rank %d passed splits summing to %d" % (size - 1, 2 * size))
    with pytest.raises(ValueError) as e:
        hvd.alltoall(mx.nd.ones((size,)), splits=[-1] + [1] * (size - 2) + [2], name="split_negative")
    assert_argument_error(e, "negative split -1")
    with pytest.raises(ValueError) as e:
        hvd.alltoall(mx.nd.ones((size + 1,)), splits=[size + 1], name="split_count")
    assert_argument_error(e, "splits of length 1", "one per rank (%d)" % size)
    with pytest.raises(ValueError) as e:
        hvd.alltoall(mx.nd.array(float(rank)), name="split_scalar")
    assert_argument_error(e, "scalar")
    # The runtime goes on, unnamed collectives still agree across ranks.
    out, received = hvd.alltoall(mx.nd.full((size,), rank), splits=mx.nd.ones((size,), dtype=np.int64))
    np.testing.assert_array_equal(out.asnumpy(), np.arange(size))
    assert received.asnumpy().tolist() == [1] * size


@pytest.mark.parametrize("splits, words", [
    (lambda size: mx.nd.ones((size,), dtype=np.float32), ["splits must hold integers", "float32"]),
    (lambda size: np.ones(size, dtype=np.float64), ["splits must hold integers", "float64"]),
    (lambda size: mx.nd.ones((size,), dtype=np.bool_), ["splits must hold integers", "bool"]),
    (lambda size: [1.0] * size, ["splits=[1.0", "integers"]),
    (lambda size: [True] * size, ["splits=[True", "integers"]),
    (lambda size: np.ones((1, size), dtype=np.int32), ["splits must be a vector", "(1, {size})"]),
    (lambda size: size, ["splits={size}", "integers"]),
])
def test_alltoall_splits_of_the_wrong_type_raise(splits, words):
    # Checked before any communication: every rank passing them raises, none waits for the others.
    rank, size = init()
    with pytest.raises(ValueError) as e:
        hvd.alltoall(mx.nd.ones((size,)), splits(size), name="split_type")
    assert_argument_error(e, "tfring.mxnet.alltoall", *[w.format(size=size) for w in words])


def test_reducescatter_of_a_scalar_raises_on_every_rank():
    rank, size = init()
    with pytest.raises(ValueError) as e:
        hvd.reducescatter(mx.nd.array(rank, dtype=np.float32), op=hvd.Average)
    assert_argument_error(e, "reducescatter", "scalar")
    with pytest.raises(ValueError) as e:
        hvd.grouped_reducescatter([mx.nd.zeros((3, 1)), mx.nd.array(rank, dtype=np.float32)], op=hvd.Sum)
    assert_argument_error(e, "grouped_reducescatter", "scalar")
    # A scalar on one rank only: the ranks disagree on the shape, every rank raises (a RuntimeError).
    x = mx.nd.array(1.0) if rank == 0 else mx.nd.ones((1,))
    with pytest.raises(mx.base.MXNetError, match="disagree on shape"):
        hvd.reducescatter(x, op=hvd.Sum, name="scalar_on_rank_0")
    # Scalars still gather as one value per rank; the runtime goes on.
    np.testing.assert_array_equal(hvd.allgather(mx.nd.array(float(rank))).asnumpy(), np.arange(size))
    out = hvd.reducescatter(mx.nd.ones((size, 2)), op=hvd.Sum)
    np.testing.assert_array_equal(out.asnumpy(), np.full((1, 2), size))


def test_shutdown_raises_a_pending_failure_and_still_shuts_down():
    rank, size = init()
    hvd.allreduce(mx.nd.ones((rank + 1,)), name="pending_mismatch")  # fails in the engine, never read
    with pytest.raises(mx.base.MXNetError, match="disagree on shape"):
        hvd.shutdown()
    assert not hvd.is_initialized()
    hvd.init()
    np.testing.assert_allclose(hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum).asnumpy(), size)


def test_shutdown_then_init_again():
    rank, size = init()
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(RuntimeError):
        hvd.allreduce(mx.nd.ones((2,)))
    with pytest.raises(RuntimeError):
        hvd.allgather(mx.nd.ones((2,)))
    hvd.init()
    out = hvd.allreduce(mx.nd.ones((2,)) * (rank + 1), op=hvd.Sum)
    np.testing.assert_allclose(out.asnumpy(), size * (size + 1) / 2)
