"""Gradient compression applied around allreduce: cast to a 16-bit float for the wire, back after."""
import tensorflow as tf

from tfring.common.compression import Compressor, NoneCompressor, compressions  # noqa: F401 (public here too)


FP16Compressor, BF16Compressor, Compression = compressions(lambda t: t.dtype.is_floating, tf.cast, tf.float16,
                                                          tf.bfloat16)
