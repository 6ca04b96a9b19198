"""jit_compile="auto" never fails because of tfring (tfring/keras/_backend/_tf_jit_fallback.py): the decision, and
what this build's XLA lowering serves. The fallback inside a real fit at np=2/3: ranks_xla_fallback.py."""
import pytest

from tfring.common import library
from tfring.keras._backend import _tf_jit_fallback as jit_fallback
from tfring.keras._backend._tf_jit_fallback import decide


@pytest.mark.parametrize("requested,devices,served,expected", [
    ("auto", {"CPU"}, {"CPU"}, False),                # Keras' own rule on CPU-only machines
    ("auto", {"CPU", "GPU"}, {"CPU", "GPU"}, True),   # a GPU this build lowers to: XLA as Keras would
    ("auto", {"CPU", "GPU"}, {"CPU"}, False),         # a GPU without tfring's CUDA handlers: fall back
    ("auto", {"CPU", "GPU", "TPU"}, {"CPU", "GPU"}, False),
    (True, {"CPU", "GPU"}, {"CPU"}, True),            # explicit True stays as asked
    (True, {"CPU"}, {"CPU"}, True),
    (False, {"CPU", "GPU"}, {"CPU", "GPU"}, False),
])
def test_decide(requested, devices, served, expected):
    value, why = decide(requested, devices, served)
    assert value is expected
    fell_back = requested == "auto" and not value and devices != {"CPU"}
    assert (why is not None) == fell_back
    if fell_back:
        assert "jit_compile=False" in why and "TFRING_GPU_OPERATIONS=NCCL" in why


def test_decide_refuses_other_values():
    with pytest.raises(ValueError, match="'maybe'"):
        decide("maybe", {"CPU"}, {"CPU"})


def test_served_device_types_follow_the_build():
    gpu_build = library.build_info().get("gpu", "none") != "none"
    assert jit_fallback.served_device_types() == ({"CPU", "GPU"} if gpu_build else {"CPU"})
