"""Gradient compression applied around allreduce: cast to a 16-bit float for the wire, back after."""
import tensorflow as tf


class Compressor:
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    pass


class _CastCompressor(Compressor):
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating and tensor.dtype != cls.wire_dtype:
            return tf.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tf.cast(tensor, ctx) if ctx is not None else tensor


class FP16Compressor(_CastCompressor):
    wire_dtype = tf.float16


class BF16Compressor(_CastCompressor):
    wire_dtype = tf.bfloat16


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
