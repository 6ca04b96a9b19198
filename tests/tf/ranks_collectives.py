"""Values of every collective x dtype x shape, eager and in tf.function, checked on every rank."""
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import ANY, NUMERIC, SHAPES, as_np, init, tensor, tolerance, value

R, N = init()
OPS = {hvd.Sum: np.sum, hvd.Min: np.min, hvd.Max: np.max, hvd.Product: np.prod}


def expected_reduce(op, shape, dtype):
    stack = np.stack([value(r, shape, dtype) for r in range(N)])
    if op == hvd.Average:
        total = np.sum(stack, axis=0)
        return np.trunc(total / N) if dtype.is_integer else total / N
    return OPS[op](stack, axis=0)


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: d.name)
@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product])
def test_allreduce(dtype, op):
    for shape in SHAPES:
        out = hvd.allreduce(tensor(R, shape, dtype), op=op)
        assert out.dtype == dtype and tuple(out.shape) == shape
        np.testing.assert_allclose(as_np(out), expected_reduce(op, shape, dtype), rtol=tolerance(dtype))


@pytest.mark.parametrize("dtype", [tf.int32, tf.float32, tf.bfloat16], ids=lambda d: d.name)
def test_allreduce_in_tf_function_with_scales(dtype):
    @tf.function
    def f(x):
        return hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    for _ in range(3):  # repeated steps go through the response cache
        out = f(tensor(R, (4, 2), dtype))
        np.testing.assert_allclose(as_np(out), expected_reduce(hvd.Sum, (4, 2), dtype), rtol=tolerance(dtype))


def test_constant_input_in_tf_function_runs_every_call():
    # A stateful op is never constant-folded: each call is a real collective with this rank's value.
    @tf.function
    def f():
        return hvd.allreduce(tf.constant([float(R)]), op=hvd.Sum)
    for _ in range(2):
        assert f().numpy()[0] == sum(range(N))


def test_grouped_allreduce_mixed_dtypes():
    xs = [tensor(R, (3,), tf.float32), tensor(R, (2, 2), tf.int32), tensor(R, (), tf.float64),
          tensor(R, (5,), tf.float32)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    for x, out in zip(xs, outs):
        np.testing.assert_array_equal(out.numpy(), expected_reduce(hvd.Sum, tuple(x.shape), x.dtype))

    @tf.function
    def f(a, b):
        return hvd.grouped_allreduce([a, b], op=hvd.Average)
    a, b = f(xs[0], xs[3])
    np.testing.assert_allclose(a.numpy(), expected_reduce(hvd.Average, (3,), tf.float32))


@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum, hvd.Max])
def test_grouped_allreduce_large_and_small_members_with_scales(op):
    # Members >= 1 MiB are reduced input -> output directly, smaller ones through the fusion buffer.
    shapes = [(300, 1000), (7,), (1 << 18,), (3, 3)]
    xs = [tensor(R, s, tf.float32) for s in shapes]

    @tf.function
    def f(*ts):
        return hvd.grouped_allreduce(list(ts), op=op, prescale_factor=0.5, postscale_factor=4.0)
    for _ in range(2):
        outs = f(*xs)
        for s, out in zip(shapes, outs):
            np.testing.assert_allclose(out.numpy(), 2.0 * expected_reduce(op, s, tf.float32), rtol=1e-6)
        assert np.array_equal(xs[0].numpy(), tensor(R, shapes[0], tf.float32).numpy())  # input untouched


@pytest.mark.parametrize("dtype", ANY, ids=lambda d: d.name)
def test_allgather_different_first_dims(dtype):
    for trailing in [(), (2,), (0, 3)]:
        def rows(r, trailing=trailing):
            return (r + 1) if trailing != (0, 3) else r
        out = hvd.allgather(tensor(R, (rows(R),) + trailing, dtype))
        want = np.concatenate([value(r, (rows(r),) + trailing, dtype) for r in range(N)])
        assert tuple(out.shape) == want.shape
        np.testing.assert_allclose(as_np(out).astype(np.float64), want.astype(np.float64))


def test_allgather_scalar_and_empty_and_grouped():
    out = hvd.allgather(tf.constant(float(R)))
    np.testing.assert_array_equal(out.numpy(), np.arange(N, dtype=np.float32))
    empty = hvd.allgather(tf.zeros([0, 4], tf.int64))
    assert tuple(empty.shape) == (0, 4)
    a, b = hvd.grouped_allgather([tf.fill([R + 1], R), tf.fill([1, 2], 2 * R)])
    np.testing.assert_array_equal(a.numpy(), np.concatenate([[r] * (r + 1) for r in range(N)]))
    np.testing.assert_array_equal(b.numpy(), np.array([[2 * r, 2 * r] for r in range(N)]))


@pytest.mark.parametrize("dtype", ANY, ids=lambda d: d.name)
def test_broadcast_every_root(dtype):
    for root in range(N):
        for shape in SHAPES:
            out = hvd.broadcast(tensor(R, shape, dtype), root_rank=root)
            np.testing.assert_array_equal(as_np(out).astype(np.float64), value(root, shape, dtype).astype(np.float64))


@pytest.mark.parametrize("dtype", [tf.bool, tf.uint8, tf.bfloat16, tf.float32, tf.int64], ids=lambda d: d.name)
def test_alltoall_uneven_splits(dtype):
    # Rank r sends (r + d) % 3 rows to rank d; row values encode (sender, destination).
    splits = [(R + d) % 3 for d in range(N)]
    rows = []
    for d in range(N):
        rows += [[R * 10 + d] * 2] * splits[d]
    src = tf.cast(tf.constant(np.array(rows, dtype=np.float64).reshape(-1, 2)), dtype)
    out, received = hvd.alltoall(src, splits=splits)
    want_rows = []
    for s in range(N):
        want_rows += [[s * 10 + R] * 2] * ((s + R) % 3)
    want = np.array(want_rows, dtype=np.float64).reshape(-1, 2)
    if dtype == tf.bool:
        want = want.astype(bool)
    np.testing.assert_array_equal(received.numpy(), [(s + R) % 3 for s in range(N)])
    np.testing.assert_array_equal(as_np(out).astype(np.float64), want.astype(np.float64))


def test_alltoall_default_even_splits():
    # Without splits only the output comes back (Horovod); the received splits are then known to be even.
    out = hvd.alltoall(tf.range(2 * N) + 100 * R)
    assert not isinstance(out, tuple)
    want = np.concatenate([np.arange(2 * R, 2 * R + 2) + 100 * s for s in range(N)])
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("dtype", [tf.int32, tf.float16, tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Max])
@pytest.mark.parametrize("cols", [2, 40000], ids=["mpi", "ring"])  # from 256 KiB the core's ring (ring.cc) runs
def test_reducescatter_uneven(dtype, op, cols):
    dim0 = 2 * N + 1  # the first dim0 % N ranks get one extra row
    out = hvd.reducescatter(tensor(R, (dim0, cols), dtype), op=op)
    full = expected_reduce(op, (dim0, cols), dtype)
    counts = [dim0 // N + (1 if r < dim0 % N else 0) for r in range(N)]
    start = sum(counts[:R])
    np.testing.assert_allclose(as_np(out), full[start:start + counts[R]], rtol=tolerance(dtype))


def test_indexed_slices_allreduce_gathers():
    slices = tf.IndexedSlices(tf.fill([1, 2], float(R + 1)), tf.constant([R]), dense_shape=tf.constant([N, 2]))
    out = hvd.allreduce(slices, op=hvd.Average)
    assert isinstance(out, tf.IndexedSlices)
    np.testing.assert_array_equal(out.indices.numpy(), np.arange(N))
    np.testing.assert_allclose(out.values.numpy()[:, 0], (np.arange(N) + 1) / N)
    dense = tf.convert_to_tensor(out)
    np.testing.assert_allclose(dense.numpy()[:, 1], (np.arange(N) + 1) / N)


def test_indexed_slices_integer_average_and_refusals():
    # Horovod divides the gathered values (true division): integer values average to floats, not to zero.
    slices = tf.IndexedSlices(tf.fill([1, 2], R + 1), tf.constant([R]), dense_shape=tf.constant([N, 2]))
    out = hvd.allreduce(slices, op=hvd.Average, name="int_slices")
    assert out.values.dtype == tf.float64
    np.testing.assert_allclose(out.values.numpy()[:, 0], (np.arange(N) + 1) / N)
    for kwargs in ({"op": hvd.Max}, {"op": hvd.Product}, {"prescale_factor": 2.0}, {"postscale_factor": 0.5}):
        with pytest.raises(NotImplementedError):
            hvd.allreduce(slices, **kwargs)


# Each rank sends values the wire dtype cannot hold; the rounding is unambiguous (round-to-nearest-even, and every
# sum of rounded values is exact in the wire dtype), so the result proves the values travelled in that dtype:
# a no-op compression gives N * the input, the other 16-bit dtype gets at least one column wrong.
WIRE_CASES = {
    # fp16 (11-bit significand): 1+2^-11 is a tie -> 1; 2-2^-12 -> 2; -(1+2^-12) -> -1; 1+2^-8 is exact;
    # 2^17 is beyond fp16's 65504 -> inf.
    "fp16": ([1 + 2 ** -11, 2 - 2 ** -12, -(1 + 2 ** -12), 1 + 2 ** -8, 2.0 ** 17],
             [1.0, 2.0, -1.0, 1 + 2 ** -8, np.inf]),
    # bf16 (8-bit significand): 1+2^-8 is a tie -> 1; 2-2^-9 -> 2; -(1+2^-9) -> -1; 1+2^-11 -> 1; 2^17 is exact.
    "bf16": ([1 + 2 ** -8, 2 - 2 ** -9, -(1 + 2 ** -9), 1 + 2 ** -11, 2.0 ** 17],
             [1.0, 2.0, -1.0, 1.0, 2.0 ** 17]),
}


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("wire", sorted(WIRE_CASES))
def test_compression_rounds_to_the_wire_dtype(wire, dtype):
    comp = getattr(hvd.Compression, wire)
    sent, rounded = WIRE_CASES[wire]
    x = tf.constant(sent, dtype)
    assert not np.array_equal(x.numpy(), rounded)  # the input itself is not representable in the wire dtype
    want = np.array(rounded) * N

    @tf.function
    def f(t):
        return hvd.allreduce(t, op=hvd.Sum, compression=comp, name="wire_%s_%s" % (wire, dtype.name))
    for out in (hvd.allreduce(x, op=hvd.Sum, compression=comp), f(x)):
        assert out.dtype == dtype  # decompressed back to the input dtype
        np.testing.assert_array_equal(out.numpy(), want)
    # No compression: the exact values arrive (N * input is exact in float32 and float64).
    np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Sum).numpy(), np.array(sent) * N)


def test_barrier_and_topology():
    hvd.barrier()
    assert hvd.size() == N and hvd.rank() == R
    assert hvd.local_size() == N and hvd.local_rank() == R  # one host
    assert hvd.cross_size() == 1 and hvd.cross_rank() == 0
    assert hvd.is_homogeneous() and hvd.mpi_threads_supported() and hvd.mpi_built() and hvd.mpi_enabled()
    assert not hvd.nccl_built() and not hvd.gloo_built() and not hvd.cuda_built()
    assert int(hvd.size_op()) == N and int(hvd.rank_op()) == R
    assert int(hvd.local_size_op()) == N and int(hvd.local_rank_op()) == R


def test_device_dense_places_the_collective():
    x = tensor(R, (4,), tf.float32)
    out = hvd.allreduce(x, op=hvd.Sum, device_dense="/cpu:0")
    assert out.device.endswith("CPU:0"), out.device
    np.testing.assert_array_equal(out.numpy(), expected_reduce(hvd.Sum, (4,), tf.float32))
    outs = hvd.grouped_allreduce([x, x * 2], op=hvd.Sum, device_dense="/cpu:0")
    np.testing.assert_array_equal(outs[1].numpy(), 2 * expected_reduce(hvd.Sum, (4,), tf.float32))


@pytest.mark.parametrize("dtype,v", [(tf.uint8, 200), (tf.int8, 100), (tf.int8, -100), (tf.uint16, 60000),
                                     (tf.int16, 30000)])
def test_small_integer_sums_wrap_like_tensorflow(dtype, v):
    # 64 elements: Open MPI's vectorised (AVX) MPI_SUM saturates 8/16-bit sums on long vectors; TF wraps.
    t = tf.fill([64], tf.constant(v, dtype))
    want = np.full(64, v, dtype.as_numpy_dtype) * np.array(N, dtype.as_numpy_dtype)  # numpy wraps too
    np.testing.assert_array_equal(hvd.allreduce(t, op=hvd.Sum, name="wrap_%s_%d" % (dtype.name, v)).numpy(), want)
    scattered = hvd.reducescatter(tf.fill([64 * N], tf.constant(v, dtype)), op=hvd.Sum, name="wrap_rs_%s_%d"
                                  % (dtype.name, v))
    np.testing.assert_array_equal(scattered.numpy(), want)
