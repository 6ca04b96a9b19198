"""Gradient compression applied around allreduce: cast to a 16-bit float for the wire, back after."""
import tensorflow as tf

from tfring.common.compression import Compressor, NoneCompressor  # noqa: F401 (public here too)


class _CastCompressor(Compressor):
    """Floating tensors travel as `wire_dtype`; other dtypes as they are."""
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        """Casts a floating tensor of another dtype to `wire_dtype`.

        Args:
            tensor: the tensor to send.

        Returns:
            tuple: (the cast tensor, its original dtype), or (tensor, None) when it is not cast.
        """
        if tensor.dtype.is_floating and tensor.dtype != cls.wire_dtype:
            return tf.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        """Casts back to the original dtype.

        Args:
            tensor: the collective's result.
            ctx: the original dtype, or None.

        Returns:
            The tensor in its original dtype.
        """
        return tf.cast(tensor, ctx) if ctx is not None else tensor


class FP16Compressor(_CastCompressor):
    """Floating tensors travel as float16 (half the bytes of float32; less range and precision)."""
    wire_dtype = tf.float16


class BF16Compressor(_CastCompressor):
    """Floating tensors travel as bfloat16 (float32's range, 8 bits of mantissa)."""
    wire_dtype = tf.bfloat16


class Compression:
    """The compressions, for `compression=` of allreduce, the tapes and the optimizers (Horovod's names).

    `Compression.none` (default), `Compression.fp16`, `Compression.bf16`.
    """
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
