"""The stall deadline inside jax.jit on real ranks: a rank that never submits a step's collective makes it fail on
every rank that waits in it (the stall error naming the collective and the missing rank), never a hang; the
runtime works afterwards. The runtime is restarted for this file with a 4 s deadline, and with a 2 s one
around each wait (the first, compiling step runs under the longer one: ranks compile at different speeds)."""
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tfring.jax as hvd

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()
KNOBS = {"TFRING_STALL_CHECK_TIME_SECONDS": "1", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "4"}
SHORT = dict(KNOBS, TFRING_STALL_SHUTDOWN_TIME_SECONDS="2")


def restart(env):
    # Read at init; every rank restarts here together (the files of a launch run in the same order everywhere).
    hvd.barrier()
    hvd.shutdown()
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    hvd.init()


@pytest.fixture(scope="module", autouse=True)
def stall_knobs():
    saved = {k: os.environ.get(k) for k in KNOBS}
    restart(KNOBS)
    yield
    restart(saved)


@pytest.mark.parametrize("grouped", [False, True])
def test_a_rank_that_skips_a_jitted_step_fails_the_others_at_the_deadline(grouped):
    name = "stalled_group" if grouped else "stalled"

    def reduce(t):
        if grouped:
            return hvd.grouped_allreduce([t, 2 * t], op=hvd.Sum, name=name)[1]
        return 2 * hvd.allreduce(t, op=hvd.Sum, name=name)
    step = jax.jit(reduce)
    # Run once everywhere first: the program is compiled and the name in the response cache (the cached fast
    # path must be inspected too), so the stall clock measures the wait alone.
    np.testing.assert_array_equal(step(jnp.ones(3)), np.full(3, 2.0 * N))
    restart(SHORT)  # the response cache starts empty again: fill it once more, then wait
    np.testing.assert_array_equal(step(jnp.ones(3)), np.full(3, 2.0 * N))
    if R != N - 1:
        start = time.time()
        with pytest.raises(jax.errors.JaxRuntimeError) as e:
            jax.block_until_ready(step(jnp.ones(3)))
        msg = str(e.value)
        assert msg.startswith("DEADLINE_EXCEEDED: tfring: stalled collective"), msg
        assert "'%s" % name in msg and "missing ranks [%d]" % (N - 1) in msg, msg
        assert "failed after TFRING_STALL_SHUTDOWN_TIME_SECONDS=2. " in msg, msg
        assert time.time() - start >= 1.5
    else:
        time.sleep(3)
    hvd.barrier()
    np.testing.assert_array_equal(step(jnp.ones(3)), np.full(3, 2.0 * N))  # and the step works again
    restart(KNOBS)
