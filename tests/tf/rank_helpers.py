"""Deterministic per-rank inputs so every rank can compute every other rank's contribution."""
import numpy as np
import tensorflow as tf

import tfring as hvd

NUMERIC = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
           tf.float64]
ANY = NUMERIC + [tf.bool]
SHAPES = [(), (0,), (3,), (2, 3, 4)]


def value(r, shape, dtype):
    """Small integer-valued data (exact in every dtype, no overflow in a product of 3 ranks)."""
    n = int(np.prod(shape)) if shape else 1
    base = (np.arange(n) % 3 + r + 1).reshape(shape)
    if dtype == tf.bool:
        return (base % 2).astype(bool)
    return base.astype(np.float64)


def tensor(r, shape, dtype):
    return tf.cast(tf.constant(value(r, shape, dtype)), dtype)


def as_np(t):
    t = tf.convert_to_tensor(t)
    if t.dtype == tf.bfloat16 or t.dtype == tf.float16:
        t = tf.cast(t, tf.float64)
    return t.numpy()


def tolerance(dtype):
    return {tf.float16: 1e-3, tf.bfloat16: 1e-2}.get(dtype, 0)


def init():
    if not hvd.is_initialized():
        hvd.init()
    return hvd.rank(), hvd.size()
