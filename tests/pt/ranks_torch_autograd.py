"""Gradients through tfring.torch's collectives are Horovod's: checked on every rank against values computed from
every rank's (known) upstream gradient."""
import pytest
import torch

import tfring.torch as hvd
from torch_helpers import init, value

R, N = init()


def weight(r, shape):
    """The upstream gradient rank r feeds back (distinct per rank and element)."""
    return value(r, shape) * 10 + torch.arange(value(r, shape).numel(), dtype=torch.float64).reshape(shape)


def backward(out, shape_of_out):
    (out * weight(R, shape_of_out)).sum().backward()


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_allreduce_gradient_is_allreduce_of_gradient(op):
    x = value(R, (2, 3)).requires_grad_()
    backward(hvd.allreduce(x, op=op, prescale_factor=2.0), (2, 3))
    ws = torch.stack([weight(r, (2, 3)) for r in range(N)])
    expected = ws.sum(0) * 2.0 / (N if op == hvd.Average else 1)
    torch.testing.assert_close(x.grad, expected)


def test_grouped_allreduce_gradient():
    xs = [value(R, (3,)).requires_grad_(), value(R, (2, 2)).requires_grad_()]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    sum((o * weight(R, tuple(o.shape))).sum() for o in outs).backward()
    for x in xs:
        torch.testing.assert_close(x.grad, sum(weight(r, tuple(x.shape)) for r in range(N)))


def test_allgather_gradient_is_this_ranks_rows_of_the_average():
    x = value(R, (R + 1, 2)).requires_grad_()
    total = N * (N + 1) // 2
    backward(hvd.allgather(x), (total, 2))
    avg = sum(weight(r, (total, 2)) for r in range(N)) / N
    start = R * (R + 1) // 2
    torch.testing.assert_close(x.grad, avg[start:start + R + 1])


def test_scalar_allgather_gradient():
    x = torch.tensor(float(R), dtype=torch.float64, requires_grad=True)
    backward(hvd.allgather(x), (N,))  # a scalar gathers as one row each
    avg = sum(weight(r, (N,)) for r in range(N)) / N
    assert x.grad.shape == ()
    torch.testing.assert_close(x.grad, avg[R])


def test_grouped_allgather_gradient():
    xs = [value(R, (R + 1,)).requires_grad_(), value(R, (1, 3)).requires_grad_()]
    outs = hvd.grouped_allgather(xs)
    sum((o * weight(R, tuple(o.shape))).sum() for o in outs).backward()
    total = N * (N + 1) // 2
    avg0 = sum(weight(r, (total,)) for r in range(N)) / N
    start = R * (R + 1) // 2
    torch.testing.assert_close(xs[0].grad, avg0[start:start + R + 1])
    avg1 = sum(weight(r, (N, 3)) for r in range(N)) / N
    torch.testing.assert_close(xs[1].grad, avg1[R:R + 1])


def test_broadcast_gradient_goes_to_the_root():
    root = N - 1
    x = value(R, (4,)).requires_grad_()
    out = hvd.broadcast(x, root)
    torch.testing.assert_close(out.detach(), value(root, (4,)))
    backward(out, (4,))
    expected = sum(weight(r, (4,)) for r in range(N)) / N if R == root else torch.zeros(4, dtype=torch.float64)
    torch.testing.assert_close(x.grad, expected)


def test_alltoall_gradient_returns_the_way_it_came():
    k = 2
    x = value(R, (N * k, 2)).requires_grad_()
    backward(hvd.alltoall(x), (N * k, 2))
    # Rows sent to rank d came back as rows [R*k, (R+1)*k) of d's output: their gradient is d's weight there.
    expected = torch.cat([weight(d, (N * k, 2))[R * k:(R + 1) * k] for d in range(N)])
    torch.testing.assert_close(x.grad, expected)


def test_alltoall_with_splits_gradient():
    splits = [d + 1 for d in range(N)]  # rank R receives R + 1 rows from every rank
    x = value(R, (sum(splits), 3)).requires_grad_()
    out, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32))
    assert received.tolist() == [R + 1] * N and not received.requires_grad
    backward(out, (N * (R + 1), 3))
    expected = torch.cat([weight(d, (N * (d + 1), 3))[R * (d + 1):(R + 1) * (d + 1)] for d in range(N)])
    torch.testing.assert_close(x.grad, expected)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_reducescatter_gradient_is_horovods_allgather(op):
    rows = 2 * N
    x = value(R, (rows, 2)).requires_grad_()
    out = hvd.reducescatter(x, op=op, postscale_factor=3.0)
    backward(out, (2, 2))
    # Horovod: the allgather of every rank's gradient, times the set size for Sum, times the scale factors.
    expected = torch.cat([weight(r, (2, 2)) for r in range(N)]) * 3.0 * (N if op == hvd.Sum else 1)
    torch.testing.assert_close(x.grad, expected)


def test_grouped_reducescatter_gradient():
    xs = [value(R, (N, 2)).requires_grad_(), value(R, (2 * N,)).requires_grad_()]
    outs = hvd.grouped_reducescatter(xs, op=hvd.Sum)
    sum((o * weight(R, tuple(o.shape))).sum() for o in outs).backward()
    torch.testing.assert_close(xs[0].grad, torch.cat([weight(r, (1, 2)) for r in range(N)]) * N)
    torch.testing.assert_close(xs[1].grad, torch.cat([weight(r, (2,)) for r in range(N)]) * N)


def test_compressed_allreduce_is_differentiable():
    x = (value(R, (3,)) / 4).float().requires_grad_()
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), float(N)))
