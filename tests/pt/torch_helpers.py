"""Deterministic per-rank torch inputs (every rank can compute every other rank's contribution) and checks."""
import torch

import tfring.torch as hvd

NUMERIC = [torch.uint8, torch.int8, torch.uint16, torch.int16, torch.int32, torch.int64, torch.float16,
           torch.bfloat16, torch.float32, torch.float64]
ANY = NUMERIC + [torch.bool]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
SHAPES = [(), (0,), (3,), (2, 3, 4)]


def value(r, shape):
    """Small integers (exact in every dtype; a product over 3 ranks fits int8) as float64."""
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float64) % 3 + r + 1).reshape(shape)


def cast(v, dtype):
    if dtype == torch.bool:
        return (v % 2).to(torch.bool)
    return v.to(dtype)


def tensor(r, shape, dtype):
    return cast(value(r, shape), dtype)


def f64(t):
    return t.to(torch.float64)


def tolerance(dtype):
    return {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(dtype, 0)


def assert_close(out, expected, dtype):
    """out has `dtype` and the values of the float64 (or bool) tensor `expected`."""
    assert out.dtype == dtype, (out.dtype, dtype)
    assert tuple(out.shape) == tuple(expected.shape), (tuple(out.shape), tuple(expected.shape))
    tol = tolerance(dtype)
    torch.testing.assert_close(f64(out), f64(expected), rtol=tol, atol=tol)


def init():
    if not hvd.is_initialized():
        hvd.init()
    return hvd.rank(), hvd.size()


def same(a, b):
    """Same dtype, shape and values (compared in float64: torch has no eq for every dtype, e.g. uint16)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(f64(a), f64(b))
