"""tfring.common.overlap: per-gradient collectives only where they can overlap backprop (a GPU, or a spare core per
rank), the TFRING_OVERLAP_GRADIENTS override, and a bad value named."""
import pytest

from tfring.common import overlap, topology


@pytest.mark.parametrize("cores, ranks, on_gpu, want", [
    (2, 2, False, False),  # one core per rank: grouped after backprop
    (4, 2, False, True),  # a spare core per rank
    (1, 1, False, False),
    (2, 2, True, True),  # a GPU: overlap (NCCL on its own stream)
])
def test_auto(monkeypatch, cores, ranks, on_gpu, want):
    monkeypatch.delenv(overlap.ENV, raising=False)
    monkeypatch.setattr(overlap.os, "sched_getaffinity", lambda _pid: set(range(cores)))
    monkeypatch.setattr(topology, "local_size", lambda: ranks)
    assert overlap.overlap_pays(lambda: on_gpu) is want


@pytest.mark.parametrize("value, want", [("1", True), ("0", False), (" AUTO ", False)])
def test_override(monkeypatch, value, want):
    monkeypatch.setenv(overlap.ENV, value)
    monkeypatch.setattr(overlap.os, "sched_getaffinity", lambda _pid: {0})
    assert overlap.overlap_pays(lambda: False) is want


def test_bad_value_is_named(monkeypatch):
    monkeypatch.setenv(overlap.ENV, "sometimes")
    with pytest.raises(ValueError, match="TFRING_OVERLAP_GRADIENTS='sometimes'"):
        overlap.overlap_pays(lambda: False)


def test_before_init_counts_one_rank(monkeypatch):
    def fail():
        raise RuntimeError("not initialized")
    monkeypatch.setattr(topology, "local_size", fail)
    monkeypatch.setattr(overlap.os, "sched_getaffinity", lambda _pid: {0, 1})
    assert overlap.cores_per_rank() == 2
