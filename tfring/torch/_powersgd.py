"""PowerSGD (tfring/common/powersgd.py) on torch tensors: the linear algebra and the eager state the torch
DistributedOptimizer (and Keras on the torch backend) keep between steps."""
import torch

from tfring.common import powersgd


class TorchLinearAlgebra(powersgd.LinearAlgebra):
    """torch's matrix products and QR."""

    # M Q and M^T P as the transposes of Q^T M^T and P^T M: torch's CPU matmul of a large matrix by a narrow one is
    # 4-20x slower than the wide-by-large product (2048 x 2048 by 2048 x 4, one thread: M^T P 20.6 ms, (P^T M)^T
    # 0.9 ms). contiguous(): the results go to the core in place.
    matmul = staticmethod(lambda a, b: torch.matmul(b.t(), a.t()).t().contiguous())
    matmul_tn = staticmethod(lambda a, b: torch.matmul(b.t(), a).t().contiguous())
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

