"""Stall inspector on real ranks: warn naming tensor and missing ranks, then (with a shutdown time) fail
the stalled collective instead of hanging; the runtime keeps working afterwards. Each deadline is the shortest the
behaviour needs: a 1 s warning, a 4 s shutdown where a rank must be reported and then complete, 2 s where the
shutdown itself is tested."""
import time

import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init, restarted

R, N = init()
MISSING = ",".join(str(r) for r in range(1, N))


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with restarted(env={"TFRING_STALL_CHECK_TIME_SECONDS": "1", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "4"}):
        yield


def test_slow_rank_is_reported_on_every_rank_then_completes(capfd):
    if R != 0:
        time.sleep(2.5)
    out = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="slow_peer")
    assert out.numpy()[0] == N
    err = capfd.readouterr().err
    assert "tensor 'slow_peer' (allreduce) waited" in err, err
    assert "missing ranks [%s]" % MISSING in err, err


SHORT = {"TFRING_STALL_CHECK_TIME_SECONDS": "1", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "2"}


@pytest.mark.parametrize("cached", [False, True])
def test_stall_shutdown_time_fails_instead_of_hanging(cached):
    with restarted(env=SHORT):
        stall_shutdown_fails_instead_of_hanging(cached)


def stall_shutdown_fails_instead_of_hanging(cached):
    name = "only_rank0_cached" if cached else "only_rank0"
    if cached:  # put the name in the response cache first: the fast path must be inspected too
        for _ in range(2):
            hvd.allreduce(tf.constant([1.0]), name=name)
    if R == 0:
        start = time.time()
        with pytest.raises(tf.errors.DeadlineExceededError) as e:
            hvd.allreduce(tf.constant([1.0]), name=name)
        waited = time.time() - start
        msg = str(e.value)
        assert "stalled collective" in msg and "'%s'" % name in msg and "missing ranks [%s]" % MISSING in msg
        # The deadline in force is the one set (a runtime that doubled or ignored it would name its own here), and
        # it was waited out, not failed at once (no upper bound: a loaded machine only makes it later).
        assert "failed after TFRING_STALL_SHUTDOWN_TIME_SECONDS=2. " in msg, msg
        assert waited >= 1.5, waited
    else:
        time.sleep(3)
    hvd.barrier()
    assert hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="after_stall").numpy()[0] == N


def test_stall_inside_compiled_code_fails_every_waiting_rank_instead_of_hanging():
    # The last rank skips a step compiled with XLA (the FFI handlers of tfring/cc/xla): the others wait inside it
    # until the deadline, then all get the stall error. A first step on every rank compiles it (under the file's
    # 4 s deadline: ranks compile at different speeds), so the clock measures the wait alone.
    step = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="xla_stalled"), jit_compile=True)
    assert step(tf.ones([2])).numpy().tolist() == [N, N]
    with restarted(env=SHORT):
        stall_inside_compiled_code_fails(step)


def stall_inside_compiled_code_fails(step):
    if R != N - 1:
        start = time.time()
        with pytest.raises(tf.errors.DeadlineExceededError) as e:
            step(tf.ones([2]))
        msg = str(e.value)
        assert "stalled collective" in msg and "'xla_stalled'" in msg and "missing ranks [%d]" % (N - 1) in msg, msg
        assert "failed after TFRING_STALL_SHUTDOWN_TIME_SECONDS=2. " in msg, msg
        assert time.time() - start >= 1.5
    else:
        time.sleep(3)
    hvd.barrier()
    assert step(tf.ones([2])).numpy().tolist() == [N, N]  # the compiled step works again
