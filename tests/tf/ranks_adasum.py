"""Adasum on CPU: every rank gets the adaptive sum of all ranks' tensors (checked against a numpy reference of
the same pairing), per tensor inside a grouped call; refused clearly where it cannot run."""
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init

R, N = init()
POWER_OF_TWO = N & (N - 1) == 0


def grad(r, n, seed):
    return np.random.RandomState(seed * 100 + r).uniform(-1, 1, n)


def combine(a, b):
    dot = float(np.dot(a, b))
    ca = 1 - dot / (2 * np.dot(a, a)) if np.dot(a, a) > 0 else 1.0
    cb = 1 - dot / (2 * np.dot(b, b)) if np.dot(b, b) > 0 else 1.0
    return ca * a + cb * b


def reference(vectors):
    """Recursive doubling: pairs at distance 1, then 2, ..."""
    while len(vectors) > 1:
        vectors = [combine(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    return vectors[0]


@pytest.mark.skipif(not POWER_OF_TWO, reason="Adasum needs a power-of-two number of ranks")
@pytest.mark.parametrize("dtype,tol", [(tf.float32, 1e-6), (tf.float64, 1e-12), (tf.float16, 2e-3)])
def test_adasum_matches_reference(dtype, tol):
    mine = grad(R, 7, 1)
    out = hvd.allreduce(tf.cast(mine, dtype), op=hvd.Adasum, name="adasum_%s" % dtype.name)
    expected = reference([grad(r, 7, 1) for r in range(N)])
    np.testing.assert_allclose(tf.cast(out, tf.float64).numpy(), expected, rtol=tol, atol=tol)


@pytest.mark.skipif(not POWER_OF_TWO, reason="Adasum needs a power-of-two number of ranks")
def test_adasum_special_cases_and_groups():
    # Parallel equal vectors average to the vector; orthogonal ones add; each tensor of a group has its own
    # coefficients (a fused buffer must not mix them).
    same = np.array([1.0, 2.0, 3.0])
    ortho = np.zeros(N)
    ortho[R] = R + 1.0
    a, b = hvd.grouped_allreduce([tf.constant(same), tf.constant(ortho)], op=hvd.Adasum, name="adasum_group")
    np.testing.assert_allclose(a.numpy(), same)
    np.testing.assert_allclose(b.numpy(), np.arange(1.0, N + 1))


def test_adasum_refused_where_it_cannot_run():
    if not POWER_OF_TWO:
        with pytest.raises(NotImplementedError, match="power-of-two number of ranks in the process set, got %d" % N):
            hvd.allreduce(tf.constant([1.0]), op=hvd.Adasum)
    with pytest.raises(NotImplementedError, match="IndexedSlices"):
        hvd.allreduce(tf.IndexedSlices(tf.constant([[1.0]]), tf.constant([0])), op=hvd.Adasum)
    if POWER_OF_TWO:
        with pytest.raises(tf.errors.InvalidArgumentError, match="floating-point"):
            hvd.allreduce(tf.constant([1, 2]), op=hvd.Adasum, name="adasum_int")
    with pytest.raises(ValueError, match="op=2 is not supported"):
        hvd.reducescatter(tf.constant([1.0] * N), op=hvd.Adasum)
    assert hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="adasum_after").numpy()[0] == N
