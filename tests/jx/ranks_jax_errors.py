"""Errors of tfring.jax on real ranks: what some rank gets wrong raises on every rank, never a hang; collectives
keep working afterwards."""
import jax.numpy as jnp
import numpy as np
import pytest

import tfring.jax as hvd

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()


def still_works():
    np.testing.assert_array_equal(hvd.allreduce(jnp.ones(2), op=hvd.Sum, name="after"), [N, N])


def test_shape_and_dtype_mismatch_raise_on_every_rank():
    with pytest.raises(RuntimeError, match="disagree on shape"):
        hvd.allreduce(jnp.ones(R + 2), name="shape_mismatch")
    with pytest.raises(RuntimeError, match="disagree"):
        hvd.allreduce(jnp.ones(2, jnp.float32 if R == 0 else jnp.int32), name="dtype_mismatch")
    still_works()


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="root_rank=7 is out of range"):
        hvd.broadcast(jnp.ones(2), 7)
    with pytest.raises(ValueError, match="root_rank must be an int"):
        hvd.broadcast(jnp.ones(2), "0")
    with pytest.raises(ValueError, match="splits=.* adding up to the first dimension 3"):
        hvd.alltoall(jnp.ones(3), splits=[1] * (N + 1))
    with pytest.raises(ValueError, match="scalar"):
        hvd.reducescatter(jnp.ones(()))
    with pytest.raises(ValueError, match="scalar"):
        hvd.allgather(jnp.ones(()))
    with pytest.raises(TypeError, match="must be a JAX array"):
        hvd.allreduce([1, 2])
    with pytest.raises(ValueError, match="sizes="):
        hvd.allgather(jnp.ones((2, 1)), sizes=(2,) * (N + 1))
    still_works()


def test_traced_shape_that_does_not_match_fails_instead_of_a_wrong_answer():
    import jax
    # Inside jit without sizes=, every rank is assumed to send as many rows as this one: rank 0 sends 2.
    x = jnp.ones((2 if R == 0 else 1, 1))
    with pytest.raises(Exception, match="compiled program allocated"):
        jax.block_until_ready(jax.jit(lambda t: hvd.allgather(t, name="wrong_sizes"))(x))
    still_works()


def test_mismatch_inside_jit_fails_on_every_rank():
    import jax
    for name, x in [("jit_shape_mismatch", jnp.ones(R + 2)),
                    ("jit_dtype_mismatch", jnp.ones(2, jnp.float32 if R == 0 else jnp.int32))]:
        with pytest.raises(jax.errors.JaxRuntimeError, match="disagree on"):
            jax.block_until_ready(jax.jit(lambda t: hvd.allreduce(t, op=hvd.Sum, name=name))(x))
    still_works()
