"""PowerSGD (tfring/common/powersgd.py) on MXNet NDArrays, for tfring.mxnet.DistributedTrainer: the products in
MXNet's engine, the orthonormal basis by numpy's QR on the host (MXNet has no QR; its LQ `linalg.gelqf` is
float32/64 only and is not on every build)."""
import mxnet as mx
import numpy as np

from tfring.common import powersgd


class MXNetLinearAlgebra(powersgd.LinearAlgebra):
    """mx.nd.dot's products and a host QR."""

    matmul = staticmethod(lambda a, b: mx.nd.dot(a, b))
    matmul_tn = staticmethod(lambda a, b: mx.nd.dot(a, b, transpose_a=True))
    matmul_nt = staticmethod(lambda a, b: mx.nd.dot(a, b, transpose_b=True))

    @staticmethod
    def orthonormal(p):
        """The reduced QR's Q of P (16-bit floats in float32): the same on every rank for the same P."""
        host = p.asnumpy()
        q = np.linalg.qr(host.astype(np.float32) if host.dtype == np.float16 else host)[0]
        return mx.nd.array(q, ctx=p.context, dtype=p.dtype)



def from_numpy(array, like):
    """An NDArray of `array` on `like`'s context, in its dtype."""
    return mx.nd.array(array, ctx=like.context, dtype=like.dtype)
