"""Deterministic per-rank mxnet inputs (every rank can compute every other rank's contribution) and checks."""
import mxnet as mx
import numpy as np

import tfring.mxnet as hvd

# Every dtype both the core and mx.nd have (mx.nd has no int16/uint16; its bfloat16 is MKLDNN-only).
NUMERIC = [np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64]
ANY = NUMERIC + [np.bool_]
FLOATS = [np.float16, np.float32, np.float64]
SHAPES = [(), (0,), (3,), (2, 3, 4)]


def value(r, shape):
    """Small integers (exact in every dtype; a product over 3 ranks fits int8) as float64."""
    n = int(np.prod(shape)) if shape else 1
    return (np.arange(n, dtype=np.float64) % 3 + r + 1).reshape(shape)


def cast(v, dtype):
    if dtype == np.bool_:
        return (v % 2).astype(np.bool_)
    return v.astype(dtype)


def array(r, shape, dtype):
    """Rank r's input as an mx.nd.NDArray of `dtype`."""
    return mx.nd.array(cast(value(r, shape), dtype), dtype=dtype)


def assert_close(out, expected, dtype):
    """`out` (NDArray) has `dtype` and the values of the numpy array `expected`."""
    got = out.asnumpy()
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    assert got.shape == tuple(expected.shape), (got.shape, expected.shape)
    tol = 1e-3 if dtype == np.float16 else 0
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(expected).astype(np.float64), rtol=tol, atol=tol)


def init():
    if not hvd.is_initialized():
        hvd.init()
    return hvd.rank(), hvd.size()
