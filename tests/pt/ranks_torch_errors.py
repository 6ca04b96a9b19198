"""Errors of tfring.torch on real ranks: what some rank gets wrong raises on every rank (never a hang), with the
exception type Horovod's torch binding uses; collectives keep working afterwards. Run last: it ends with a
shutdown and a fresh init."""
import time

import pytest
import torch

import tfring.torch as hvd
from torch_helpers import init

R, N = init()


def after_error_still_works():
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [N, N]


def test_dtype_mismatch_raises_on_every_rank():
    x = torch.ones(3, dtype=torch.float32 if R == 0 else torch.int32)
    with pytest.raises(RuntimeError, match="disagree on dtype"):
        hvd.allreduce(x, name="dtype_mismatch")
    after_error_still_works()


def test_shape_mismatch_raises_on_every_rank():
    with pytest.raises(RuntimeError, match="disagree on shape"):
        hvd.allreduce(torch.ones(R + 1), name="shape_mismatch")
    with pytest.raises(RuntimeError, match="disagree"):
        hvd.allgather(torch.ones(2, R + 1), name="allgather_mismatch")
    with pytest.raises(RuntimeError, match="disagree"):
        hvd.broadcast(torch.ones(R + 1), 0, name="broadcast_mismatch")
    with pytest.raises(RuntimeError, match="disagree"):
        hvd.reducescatter(torch.ones(N, R + 1), name="reducescatter_mismatch")
    after_error_still_works()


def test_broadcast_root_errors():
    with pytest.raises(RuntimeError, match="root_rank"):
        hvd.broadcast(torch.ones(2), R, name="roots_differ")
    with pytest.raises(ValueError, match="root_rank=%d is out of range" % N):
        hvd.broadcast(torch.ones(2), N, name="root_out_of_range")
    with pytest.raises(ValueError, match="root_rank"):
        hvd.broadcast(torch.ones(2), "0")
    after_error_still_works()


def test_bad_arguments_raise_locally():
    x = torch.ones(2)
    with pytest.raises(ValueError, match="op=9"):
        hvd.allreduce(x, op=9)
    with pytest.raises(ValueError, match="only one"):
        hvd.allreduce(x, op=hvd.Sum, average=True)
    with pytest.raises(ValueError, match="bool"):
        hvd.allreduce(torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="complex"):
        hvd.allgather(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        hvd.allreduce([1.0, 2.0])
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.reducescatter(torch.ones(N), op=hvd.Adasum)
    if N & (N - 1):
        with pytest.raises(NotImplementedError, match="power-of-two"):
            hvd.allreduce(x, op=hvd.Adasum)
    with pytest.raises(ValueError, match="tensors is empty"):
        hvd.grouped_allreduce([])
    with pytest.raises(ValueError, match="splits must hold integers"):
        hvd.alltoall(torch.ones(N), splits=torch.ones(N))
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(torch.ones(N), splits=[1.5] * N)
    after_error_still_works()


def test_unregistered_process_sets():
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError, match="not registered"):
        hvd.barrier(process_set=99)
    with pytest.raises(ValueError, match="ProcessSet"):
        hvd.allgather(torch.ones(1), process_set="all")


def test_errors_found_in_negotiation_raise_value_error_on_every_rank():
    with pytest.raises(ValueError, match="not divisible"):
        hvd.alltoall(torch.ones(N + 1), name="a2a_uneven")
    with pytest.raises(ValueError, match="splits summing to"):
        hvd.alltoall(torch.ones(N + 1), splits=[1] * N, name="a2a_bad_sum")
    with pytest.raises(ValueError, match="scalar"):
        hvd.reducescatter(torch.tensor(1.0), name="rs_scalar")
    if N & (N - 1) == 0:
        with pytest.raises(ValueError, match="floating-point"):
            hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum, name="adasum_int")
    after_error_still_works()


def test_duplicate_name_in_flight():
    # Rank 0 tries the duplicate of "dup_a" before the others submit it (so it cannot have completed), the others
    # that of "dup_b" before rank 0 submits it.
    x = torch.ones(4)
    handles = []
    for name, early in (("dup_a", R == 0), ("dup_b", R != 0)):
        if early:
            handles.append(hvd.allreduce_async(x, name=name, op=hvd.Sum))
            with pytest.raises(ValueError, match="already in flight"):
                hvd.allreduce_async(x, name=name, op=hvd.Sum)
        hvd.barrier()
        if not early:
            handles.append(hvd.allreduce_async(x, name=name, op=hvd.Sum))
    for h in handles:
        assert hvd.synchronize(h).tolist() == [N] * 4
    h = hvd.allreduce_async(x, name="dup_c")
    h2 = hvd.allgather_async(x, name="dup_c")  # another collective kind: its own name (Horovod's prefixes)
    assert hvd.synchronize(h2).shape == (4 * N,)
    assert hvd.synchronize(h).tolist() == [1] * 4


@pytest.mark.parametrize("fn", ["allreduce", "allgather", "broadcast", "alltoall", "reducescatter"])
def test_a_name_stays_taken_until_its_handle_is_synchronized(fn):
    # Horovod's *_duplicate_name_error tests submit a name twice; the first may already have completed when the
    # second comes (its peers were waiting for it). The second is refused until the first handle is synchronized.
    x = torch.ones(N * 2)
    submit = {"allreduce": lambda: hvd.allreduce_async(x, name="held"),
              "allgather": lambda: hvd.allgather_async(x, name="held"),
              "broadcast": lambda: hvd.broadcast_async(x, 0, name="held"),
              "alltoall": lambda: hvd.alltoall_async(x, name="held"),
              "reducescatter": lambda: hvd.reducescatter_async(x, name="held")}[fn]
    h = submit()
    deadline = time.monotonic() + 30
    while not hvd.poll(h):
        assert time.monotonic() < deadline
        time.sleep(0.005)
    with pytest.raises(ValueError, match="'%s.held' is already in flight" % fn):
        submit()
    hvd.synchronize(h)
    hvd.synchronize(submit())  # free again


def test_async_error_surfaces_in_synchronize_and_releases_the_handle():
    h = hvd.allreduce_async(torch.ones(R + 2), name="async_mismatch")
    with pytest.raises(RuntimeError, match="disagree on shape"):
        hvd.synchronize(h)
    assert hvd.synchronize(h) is None
    with pytest.raises(ValueError, match="handle"):
        hvd.poll(h)


def test_shutdown_then_collectives_fail_and_init_starts_again():
    hvd.barrier()
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(RuntimeError, match="not been initialized"):
        hvd.allreduce(torch.ones(1))
    hvd.init()
    assert hvd.is_initialized() and hvd.rank() == R and hvd.size() == N
    # Unnamed collectives are numbered from the start again, alike on every rank.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N
    assert hvd.allgather(torch.tensor([R])).tolist() == list(range(N))
