"""Ranks that disagree get a clear error on every rank, after which the runtime keeps working. As in Horovod,
disagreement is tf.errors.FailedPreconditionError; an argument every rank passed alike but that cannot work
(root out of range, splits that do not add up, a scalar reducescatter) is InvalidArgumentError."""
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init

R, N = init()


def assert_runtime_still_works():
    assert hvd.allreduce(tf.constant([1.0]), op=hvd.Sum).numpy()[0] == N


def test_shape_mismatch_names_tensor_and_ranks():
    with pytest.raises(tf.errors.FailedPreconditionError) as e:
        hvd.allreduce(tf.zeros([R + 1]), name="mismatch_shape")
    msg = str(e.value)
    assert "mismatch_shape" in msg and "shape" in msg and "rank 0: [1]" in msg and "rank 1: [2]" in msg
    assert_runtime_still_works()


def test_dtype_mismatch():
    with pytest.raises(tf.errors.FailedPreconditionError, match="dtype.*float32.*int32|dtype.*int32.*float32"):
        hvd.allreduce(tf.zeros([2], tf.float32 if R == 0 else tf.int32), name="mismatch_dtype")
    assert_runtime_still_works()


def test_op_and_prescale_mismatch():
    with pytest.raises(tf.errors.FailedPreconditionError, match="reduce op"):
        hvd.allreduce(tf.zeros([2]), op=hvd.Sum if R == 0 else hvd.Max, name="mismatch_op")
    with pytest.raises(tf.errors.FailedPreconditionError, match="prescale_factor"):
        hvd.allreduce(tf.zeros([2]), prescale_factor=1.0 + R, name="mismatch_prescale")
    assert_runtime_still_works()


def test_different_collectives_same_name():
    with pytest.raises(tf.errors.FailedPreconditionError, match="collective"):
        if R == 0:
            hvd.allreduce(tf.zeros([2]), name="mixed")
        else:
            hvd.allgather(tf.zeros([2]), name="mixed")
    assert_runtime_still_works()


def test_broadcast_root_errors():
    with pytest.raises(tf.errors.InvalidArgumentError, match="root_rank=%d is out of range" % N):
        hvd.broadcast(tf.zeros([2]), root_rank=N, name="bad_root")
    with pytest.raises(tf.errors.FailedPreconditionError, match="root_rank"):
        hvd.broadcast(tf.zeros([2]), root_rank=R, name="split_root")
    assert_runtime_still_works()


def test_alltoall_bad_splits():
    with pytest.raises(tf.errors.InvalidArgumentError, match="splits of length"):
        hvd.alltoall(tf.zeros([N]), splits=[1] * (N + 1), name="a2a_len")
    with pytest.raises(tf.errors.InvalidArgumentError, match="summing to"):
        hvd.alltoall(tf.zeros([N]), splits=[2] * N, name="a2a_sum")
    with pytest.raises(tf.errors.InvalidArgumentError, match="not divisible"):
        hvd.alltoall(tf.zeros([N + 1]), name="a2a_even")
    assert_runtime_still_works()


def test_allgather_trailing_dims_and_reducescatter_scalar():
    with pytest.raises(tf.errors.FailedPreconditionError, match="trailing"):
        hvd.allgather(tf.zeros([1, R + 1]), name="ag_trailing")
    with pytest.raises(tf.errors.InvalidArgumentError, match="scalar"):
        hvd.reducescatter(tf.constant(1.0), name="rs_scalar")
    assert_runtime_still_works()


def test_shape_change_after_caching():
    for _ in range(2):
        hvd.allreduce(tf.zeros([3]), name="cached_then_changed")
    with pytest.raises(tf.errors.FailedPreconditionError, match="cached_then_changed"):
        hvd.allreduce(tf.zeros([3 + (R == 0)]), name="cached_then_changed")
    out = hvd.allreduce(tf.ones([5]), op=hvd.Sum, name="cached_then_changed")
    assert out.numpy().tolist() == [N] * 5


def test_local_argument_errors_name_the_value():
    with pytest.raises(TypeError, match="string"):
        hvd.allreduce(tf.constant(["a"]))
    with pytest.raises(TypeError, match="complex64"):
        hvd.allgather(tf.constant([1j], tf.complex64))
    with pytest.raises(TypeError, match="bool"):
        hvd.allreduce(tf.constant([True]))
    with pytest.raises(ValueError, match="op=7"):
        hvd.allreduce(tf.zeros([1]), op=7)
    with pytest.raises(TypeError, match="root_rank"):
        hvd.broadcast(tf.zeros([1]), root_rank="0")
    assert_runtime_still_works()
