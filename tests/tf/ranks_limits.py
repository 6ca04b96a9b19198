"""Beyond MPI's int count: allreduce and broadcast are chunked (exact results), the others fail clearly on every
rank. The limit is lowered with TFRING_MPI_MAX_COUNT so the paths run on small tensors; a duplicate name in
flight is refused on the rank that misused it."""
import threading

import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init, restarted

R, N = init()


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with restarted(env={"TFRING_MPI_MAX_COUNT": "1000"}):
        yield


@pytest.mark.parametrize("dtype", [tf.float32, tf.int64, tf.bfloat16], ids=lambda d: d.name)
def test_allreduce_and_broadcast_are_chunked(dtype):
    n = 4567  # five chunks of <= 1000 elements
    x = tf.cast(tf.range(n) % 7 + R, dtype)
    out = hvd.allreduce(x, op=hvd.Sum, name="chunked_%s" % dtype.name)
    want = sum((np.arange(n) % 7 + r) for r in range(N))
    np.testing.assert_array_equal(tf.cast(out, tf.float64).numpy(), want)
    b = hvd.broadcast(tf.fill([5000], R + 1), root_rank=N - 1, name="chunked_bcast")  # 20000 bytes
    assert (b.numpy() == N).all()


def test_counts_beyond_the_limit_fail_clearly_on_every_rank():
    with pytest.raises(tf.errors.InvalidArgumentError, match="allgather rows of 1500 exceeds the per-call MPI count "
                                                            "limit of 1000"):
        hvd.allgather(tf.zeros([1500, 2]), name="too_many_rows")
    with pytest.raises(tf.errors.InvalidArgumentError, match="exceeds the per-call MPI count limit"):
        hvd.reducescatter(tf.zeros([N * 1100]), name="too_big_rs")
    assert hvd.allreduce(tf.ones([3]), op=hvd.Sum).numpy().tolist() == [N] * 3


def test_duplicate_name_in_flight_is_refused_locally():
    # Rank 0 submits the same name twice from two threads while its peers hold back (behind a barrier): whichever
    # call is enqueued first is in flight and must complete with the right sum once the peers submit; the other
    # must be refused at once on rank 0 alone. No sleeps: the barrier orders the peers after the refusal.
    outcomes, refused = {}, threading.Event()

    def call(i):
        try:
            outcomes[i] = hvd.allreduce(tf.ones([1]), op=hvd.Sum, name="dup_in_flight").numpy().tolist()
        except tf.errors.InvalidArgumentError as e:
            outcomes[i] = e
            refused.set()
    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(2)] if R == 0 else []
    for t in threads:
        t.start()
    got_refusal = R != 0 or refused.wait(timeout=60)  # the peers wait at the barrier meanwhile
    hvd.barrier()  # completes while rank 0's first call is still waiting for the peers
    if R != 0:
        assert hvd.allreduce(tf.ones([1]), op=hvd.Sum, name="dup_in_flight").numpy().tolist() == [N]
        return
    for t in threads:
        t.join(timeout=60)
    assert got_refusal and not any(t.is_alive() for t in threads), outcomes
    errors = [o for o in outcomes.values() if isinstance(o, Exception)]
    assert len(errors) == 1 and "'dup_in_flight' is already in flight" in str(errors[0]), outcomes
    assert [o for o in outcomes.values() if not isinstance(o, Exception)] == [[float(N)]], outcomes


def test_alltoall_beyond_the_limit_fails_on_every_rank_even_if_only_one_rank_sends_much():
    # Only the last rank sends itself 1200 rows: every rank must refuse, none may enter MPI alone.
    rows = [1200 if (R == N - 1 and d == N - 1) else 1 for d in range(N)]
    with pytest.raises(tf.errors.InvalidArgumentError, match="alltoall rows .* exceeds the per-call MPI count"):
        hvd.alltoall(tf.zeros([sum(rows)]), splits=rows, name="a2a_too_big")
    assert hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy().tolist() == [N] * 2
