"""Process sets added and removed after init (TFRING_DYNAMIC_PROCESS_SETS=1): ids agree on every rank, removed
ids are reused, duplicates are refused alike on every rank, a removed set cannot be used."""
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init, restarted
from tfring.common.process_sets import _get_process_set_ids_and_ranks as table

R, N = init()


@pytest.fixture(scope="module", autouse=True)
def runtime():
    # The Horovod alias must work too: the launch's own TFRING_DYNAMIC_PROCESS_SETS=1 is taken away meanwhile.
    with restarted(env={"HOROVOD_DYNAMIC_PROCESS_SETS": "1", "TFRING_DYNAMIC_PROCESS_SETS": None}):
        yield


def ids_agree(ps):
    ids = hvd.allgather(tf.constant([ps.process_set_id]), name="ids_%d" % ps.process_set_id).numpy().tolist()
    return ids == [ps.process_set_id] * N


def test_add_use_remove_and_reuse_ids():
    assert table() == {0: list(range(N))}
    first = hvd.add_process_set([0])
    rest = hvd.add_process_set(range(1, N))
    assert (first.process_set_id, rest.process_set_id) == (1, 2)
    assert table() == {0: list(range(N)), 1: [0], 2: list(range(1, N))}
    assert ids_agree(first) and ids_agree(rest)
    mine = first if R == 0 else rest
    total = hvd.allreduce(tf.constant([float(R)]), op=hvd.Sum, process_set=mine, name="dyn_sum").numpy()[0]
    assert total == (0.0 if R == 0 else sum(range(1, N)))

    assert hvd.remove_process_set(first) is True
    assert first.process_set_id is None
    assert table() == {0: list(range(N)), 2: list(range(1, N))}
    again = hvd.add_process_set([0, N - 1]) if N > 2 else hvd.add_process_set([0])
    assert again.process_set_id == 1  # the lowest free id, the same on every rank
    assert ids_agree(again)
    with pytest.raises(ValueError, match="already exists"):
        hvd.add_process_set(range(N - 1, 0, -1))  # the same ranks as `rest`, in another order
    with pytest.raises(ValueError, match="already exists"):
        hvd.add_process_set(range(N))  # the global set
    assert hvd.remove_process_set(hvd.global_process_set) is False
    assert hvd.remove_process_set(rest) and hvd.remove_process_set(again)
    assert table() == {0: list(range(N))}


def test_removed_set_cannot_be_used():
    ps = hvd.add_process_set(list(range(N)) [:-1] or [0]) if N > 1 else None
    hvd.remove_process_set(ps)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(tf.constant([1.0]), process_set=ps)
    with pytest.raises(ValueError, match=r"ranks \[%d\] must be a non-empty list" % N):
        hvd.add_process_set([N])
    assert hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="dyn_after").numpy()[0] == N


def test_many_sets_in_a_row():
    """Repeated add/remove cycles keep the table and the communicators consistent."""
    for i in range(5):
        ps = hvd.add_process_set([r for r in range(N) if (r + i) % 2 == 0] or [0])
        if ps.included():
            got = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, process_set=ps, name="loop_%d" % i).numpy()[0]
            assert got == ps.size()
        assert hvd.remove_process_set(ps)
    assert table() == {0: list(range(N))}
