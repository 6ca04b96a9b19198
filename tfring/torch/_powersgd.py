"""PowerSGD (tfring/common/powersgd.py) on torch tensors: the linear algebra and the eager state the torch
DistributedOptimizer (and Keras on the torch backend) keep between steps."""
import torch

from tfring.common import powersgd


class TorchLinearAlgebra(powersgd.LinearAlgebra):
    """torch's matrix products and QR."""

    matmul = staticmethod(torch.matmul)
    matmul_tn = staticmethod(lambda a, b: torch.matmul(a.t(), b))
    matmul_nt = staticmethod(lambda a, b: torch.matmul(a, b.t()))
    @staticmethod
    def orthonormal(p):
        """The reduced QR's Q: an n x r basis of P's columns (16-bit floats have no QR: theirs runs in float32)."""
        if p.dtype in (torch.float16, torch.bfloat16):
            return torch.linalg.qr(p.float()).Q.to(p.dtype)
        return torch.linalg.qr(p).Q


def eager_state(config):
    """A `powersgd.EagerState` over torch tensors.

    Args:
        config: the `PowerSGD` settings (or the class itself: its defaults).

    Returns:
        powersgd.EagerState
    """
    return powersgd.EagerState(powersgd.settings(config), TorchLinearAlgebra,
                               lambda array, like: torch.as_tensor(array, dtype=like.dtype, device=like.device),
                               torch.zeros_like, lambda t, shape: t.reshape(shape))

