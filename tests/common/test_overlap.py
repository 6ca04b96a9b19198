"""tfring.common.overlap: Horovod's per-gradient collectives unless TFRING_OVERLAP_GRADIENTS=0; a bad value named."""
import pytest

from tfring.common import overlap


@pytest.mark.parametrize("value, want", [(None, True), ("1", True), ("0", False), (" 0 ", False)])
def test_setting(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv(overlap.ENV, raising=False)
    else:
        monkeypatch.setenv(overlap.ENV, value)
    assert overlap.overlap_gradients() is want


@pytest.mark.parametrize("value", ["auto", "sometimes", ""])
def test_bad_value_is_named(monkeypatch, value):
    monkeypatch.setenv(overlap.ENV, value)
    with pytest.raises(ValueError, match="TFRING_OVERLAP_GRADIENTS=%r" % value):
        overlap.overlap_gradients()
