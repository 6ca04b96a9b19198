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
