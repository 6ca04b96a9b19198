"""Gradient compression for tfring.mxnet (Horovod's `horovod.mxnet.compression`): what is sent is compressed,
the result decompressed back to the gradient's dtype."""
import numpy as np

from tfring.common.compression import Compressor, NoneCompressor  # noqa: F401 (public here too, as Horovod)


class FP16Compressor(Compressor):
    """Sends floating-point arrays as float16 (half the bytes); other dtypes as they are."""

    @staticmethod
    def compress(tensor):
        if np.issubdtype(tensor.dtype, np.floating) and tensor.dtype != np.float16:
            return tensor.astype(np.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.astype(ctx)


class Compression:
    """The available compressors (`Compression.none`, `Compression.fp16`)."""

    none = NoneCompressor
    fp16 = FP16Compressor
