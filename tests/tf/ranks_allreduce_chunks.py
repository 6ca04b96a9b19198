"""Allreduce in chunks (TFRING_ALLREDUCE_CHUNK_BYTES): exact results for every dtype, op and scale across chunk
boundaries, directly and through the fusion buffer, with rank 0's chunk size applied on every rank. Only rank 0
asks for chunks of 4000 bytes here: a rank that made one MPI call where rank 0 makes several would fail or hang.
The ring reduce-scatter (from 256 KiB) sends its blocks in pieces of the same size: uneven blocks, many pieces."""
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init, restarted

R, N = init()
CHUNK = 4000  # bytes: 1000 float32, 500 float64/int64, 2000 float16


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with restarted(env={"TFRING_ALLREDUCE_CHUNK_BYTES": CHUNK if R == 0 else 0}):
        yield


def values(n, rank, dtype):
    return tf.cast((np.arange(n) % 11 + 3 * rank) % 16, dtype)  # small integers: exact in float16 sums too


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16, tf.int64, tf.int32], ids=lambda d: d.name)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_large_tensor_is_exact_across_chunks(dtype, op):
    n = 4567  # 2.3-9 chunks by dtype, the last one partial
    out = hvd.allreduce(values(n, R, dtype), op=getattr(hvd, op), name="chunks_%s_%s" % (dtype.name, op))
    total = sum(values(n, r, tf.float64).numpy() for r in range(N))
    want = total if op == "Sum" else (total // N if dtype.is_integer else total / N)
    assert out.dtype == dtype
    np.testing.assert_allclose(tf.cast(out, tf.float64).numpy(), want, rtol=1e-3 if dtype == tf.float16 else 1e-7)


def test_scaled_average_divides_each_element_once():
    n = 3001
    x = tf.fill([n], float(R + 1))
    out = hvd.allreduce(x, op=hvd.Average, prescale_factor=2.0, postscale_factor=3.0, name="chunks_scaled")
    np.testing.assert_allclose(out.numpy(), np.full(n, 6.0 * sum(range(1, N + 1)) / N), rtol=1e-6)


def test_fusion_buffer_larger_than_a_chunk():
    # Tensors under 1 MiB go through the fusion buffer (8 MiB by default): 7 of them make 5.5 chunks.
    xs = [tf.fill([777 + i], float(R + i)) for i in range(7)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Average, name="chunks_fused")
    for i, out in enumerate(outs):
        np.testing.assert_allclose(out.numpy(), np.full(777 + i, i + (N - 1) / 2.0), rtol=1e-6)


def test_in_place_gradients_in_a_function():
    # Forwarded inputs (a function's temporaries) are reduced in place, chunk by chunk.
    @tf.function
    def step(v):
        return hvd.allreduce(v * 2.0, op=hvd.Average, name="chunks_in_place")
    out = step(tf.fill([2500], float(R)))
    np.testing.assert_allclose(out.numpy(), np.full(2500, float(N - 1)), rtol=1e-6)


@pytest.mark.parametrize("op", ["Sum", "Average", "Min"])
def test_ring_reducescatter_in_pieces(op):
    dim0, cols = 2 * N + 1, 20011  # blocks of 2 or 3 rows (uneven by 20011 elements), many 4000-byte pieces
    assert dim0 * cols * 4 >= 256 << 10  # the ring's threshold (ring.cc): smaller inputs take MPI's own call
    x = tf.cast(values(dim0 * cols, R, tf.float32), tf.float32) + tf.range(dim0 * cols, dtype=tf.float32) % 5
    out = hvd.reducescatter(tf.reshape(x, [dim0, cols]), op=getattr(hvd, op), name="chunks_rs_" + op)
    every = np.stack([values(dim0 * cols, r, tf.float64).numpy() + np.arange(dim0 * cols) % 5 for r in range(N)])
    full = {"Sum": every.sum(0), "Average": every.sum(0) / N, "Min": every.min(0)}[op].reshape(dim0, cols)
    rows = [dim0 // N + (1 if r < dim0 % N else 0) for r in range(N)]
    start = sum(rows[:R])
    np.testing.assert_allclose(out.numpy(), full[start:start + rows[R]], rtol=1e-6)


def test_joined_rank_zeros_chunk_by_chunk():
    # The joined rank zero-fills one chunk at a time; its calls must still pair with its peers' chunks.
    for step in range(1 + R):
        out = hvd.allreduce(tf.fill([4567], float(R + 1)), op=hvd.Average, name="chunks_join")
        np.testing.assert_allclose(out.numpy(), np.full(4567, sum(r + 1 for r in range(N) if r >= step) / N))
    assert hvd.join() == N - 1
