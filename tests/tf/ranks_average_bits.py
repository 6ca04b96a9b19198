"""Average's values, bit for bit, on every rank. At np=2 a float32/float64 Average is folded into the reduction (an MPI
op that halves as it adds: no division pass afterwards); it must give the bits that summing and then dividing
give: numpy's (a + b) / 2 of the gathered inputs, exactly, including infinities, NaN, huge values whose sum
overflows and subnormal results. At other sizes the sum's order is MPI's (it may differ per segment), so values
are compared within summation's error bound, a few eps of sum(|x|) / N: relative to the result alone, a sum whose
terms cancel can differ by far more (seen: 1.4e-6 at np=3); every rank must still hold the same bits."""
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init

R, N = init()


def inputs(n, dtype, seed):
    """This rank's input and every rank's (the same seeded draw): wide exponents, specials at the front."""
    info = np.finfo(dtype)
    all_ranks = []
    for r in range(N):
        rng = np.random.RandomState(seed * 100 + r)
        exponent = rng.randint(info.minexp - 4, info.maxexp, size=n)  # subnormals to the largest finite values
        x = np.ldexp(rng.uniform(-1, 1, size=n), exponent).astype(dtype)
        x[:6] = [np.inf, -np.inf, np.nan, info.max, info.tiny * 3, -info.tiny][:6]
        x[6] = info.max if r == 0 else -np.inf  # inf - inf: NaN; max + max: inf
        all_ranks.append(x)
    return all_ranks[R], all_ranks


def expected(all_ranks, dtype):
    total = all_ranks[0].copy()
    for x in all_ranks[1:]:
        total = total + x
    return total / dtype(N)


def check(out, all_ranks, dtype):
    got = np.asarray(out)
    assert got.dtype == dtype
    gathered = hvd.allgather_object(got.tobytes())
    assert all(g == gathered[0] for g in gathered), "ranks hold different bits"
    want = expected(all_ranks, dtype)
    if N == 2:
        np.testing.assert_array_equal(got, want)  # bits, NaN where numpy has NaN
        return
    finite = np.isfinite(want) & (np.abs(want) < np.finfo(dtype).max / 4) & (np.abs(want) > np.finfo(dtype).tiny)
    with np.errstate(over="ignore"):
        magnitude = sum(np.abs(x.astype(np.float64)) for x in all_ranks) / N
    bound = 4 * np.finfo(dtype).eps * magnitude[finite]
    assert np.all(np.abs(got[finite].astype(np.float64) - want[finite]) <= bound), "outside the summation bound"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("n", [1000, 300000], ids=["fused", "direct"])  # under / over 1 MiB: fusion buffer or not
def test_average_matches_sum_then_divide(dtype, n):
    mine, all_ranks = inputs(n, dtype, seed=n)
    with np.errstate(over="ignore", invalid="ignore"):
        out = hvd.allreduce(tf.constant(mine), op=hvd.Average, name="avg_bits_%s_%d" % (dtype.__name__, n))
        check(out, all_ranks, dtype)


def test_average_in_place_in_a_function_and_grouped():
    # Forwarded inputs reduce in place; a group mixes a direct tensor with fused ones.
    mine, all_ranks = inputs(400000, np.float32, seed=7)

    @tf.function
    def step(v):
        return hvd.grouped_allreduce([v * 1.0, v[:100] * 1.0, v[100:2100] * 1.0], op=hvd.Average, name="avg_bits_fn")
    outs = step(tf.constant(mine))
    with np.errstate(over="ignore", invalid="ignore"):
        for out, part in zip(outs, (slice(None), slice(0, 100), slice(100, 2100))):
            check(out, [x[part] for x in all_ranks], np.float32)


def test_scaled_average():
    n = 5000
    mine = np.linspace(-3.0, 5.0, n).astype(np.float32) * (R + 1)
    out = hvd.allreduce(tf.constant(mine), op=hvd.Average, prescale_factor=0.25, postscale_factor=3.0,
                        name="avg_bits_scaled")
    total = sum(np.linspace(-3.0, 5.0, n).astype(np.float32) * (r + 1) * np.float32(0.25) for r in range(N))
    np.testing.assert_allclose(out.numpy(), total * np.float32(3.0) / N, rtol=1e-6)
