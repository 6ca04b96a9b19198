"""tfring.torch.SyncBatchNorm on real ranks: ranks hold batches of different sizes and offsets, and every rank's
output, running statistics and gradients must equal those of torch's BatchNorm over the concatenated batch."""
import pytest
import torch

import tfring.torch as hvd

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()
C = 3
torch.set_num_threads(1)
REFERENCE = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d, 5: torch.nn.BatchNorm3d}


def rank_data(r, tail, seed=10):
    """Rank r holds r + 2 rows, centred at 5 r: local statistics differ from the global ones."""
    g = torch.Generator().manual_seed(seed + r)
    return torch.randn((r + 2, C) + tail, generator=g, dtype=torch.float64) * (r + 1) + 5.0 * r


def upstream(r, shape, seed=20):
    """A fixed gradient of the loss with respect to rank r's output."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed + r), dtype=torch.float64)


def make_pair(momentum=0.1, affine=True):
    sync = hvd.SyncBatchNorm(C, momentum=momentum, affine=affine).double()
    ref = REFERENCE[2](C, momentum=momentum, affine=affine).double()
    if affine:
        with torch.no_grad():
            for bn in (sync, ref):
                bn.weight.copy_(torch.tensor([0.5, 1.5, 2.0]))
                bn.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    return sync, ref


def reference_module(ref, ndim):
    out = REFERENCE[ndim](C, momentum=ref.momentum, affine=ref.affine).double()
    out.load_state_dict(ref.state_dict())
    return out


@pytest.mark.parametrize("tail", [(), (4,), (2, 3), (2, 2, 2)], ids=["2d", "3d", "4d", "5d"])
@pytest.mark.parametrize("affine", [True, False])
def test_training_output_and_gradients_equal_batch_norm_on_the_global_batch(tail, affine):
    xs = [rank_data(r, tail) for r in range(N)]
    sync, ref = make_pair(affine=affine)
    ref = reference_module(ref, len(tail) + 2)
    x = xs[R].clone().requires_grad_(True)
    out = sync(x)
    (out * upstream(R, out.shape)).sum().backward()

    x_all = torch.cat(xs).requires_grad_(True)
    out_all = ref(x_all)
    (out_all * torch.cat([upstream(r, xs[r].shape) for r in range(N)])).sum().backward()
    offset = sum(len(xs[r]) for r in range(R))
    rows = slice(offset, offset + len(xs[R]))
    torch.testing.assert_close(out, out_all[rows])
    torch.testing.assert_close(x.grad, x_all.grad[rows])
    torch.testing.assert_close(sync.running_mean, ref.running_mean)
    torch.testing.assert_close(sync.running_var, ref.running_var)
    assert int(sync.num_batches_tracked) == 1
    if affine:
        # Parameter gradients stay local (the optimizer averages them); their sum is the global batch's.
        for p, q in ((sync.weight, ref.weight), (sync.bias, ref.bias)):
            torch.testing.assert_close(hvd.allreduce(p.grad, op=hvd.Sum, name="sbn_check"), q.grad)


def test_eval_uses_running_statistics_and_momentum_none_averages():
    sync, ref = make_pair(momentum=None)
    for step in range(3):
        xs = [rank_data(r, (), seed=step * 10) for r in range(N)]
        sync(xs[R])
        ref(torch.cat(xs))
    torch.testing.assert_close(sync.running_mean, ref.running_mean)
    torch.testing.assert_close(sync.running_var, ref.running_var)
    sync.eval()
    ref.eval()
    x = rank_data(R, (), seed=99) + R  # any batch, any size: no communication in eval mode
    torch.testing.assert_close(sync(x), ref(x))


def test_without_running_statistics_eval_still_uses_global_batch_statistics():
    sync = hvd.SyncBatchNorm(C, track_running_stats=False).double().eval()
    ref = torch.nn.BatchNorm1d(C, track_running_stats=False).double().eval()
    xs = [rank_data(r, (5,)) for r in range(N)]
    offset = sum(len(xs[r]) for r in range(R))
    torch.testing.assert_close(sync(xs[R]), ref(torch.cat(xs))[offset:offset + len(xs[R])])


def test_float32_and_half_inputs_keep_their_dtype():
    sync = hvd.SyncBatchNorm(C)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        xs = [rank_data(r, (4,)).to(dtype) for r in range(N)]
        out = sync(xs[R])
        assert out.dtype == dtype
        ref = torch.nn.functional.batch_norm(torch.cat(xs).double(), None, None, training=True, eps=sync.eps)
        offset = sum(len(xs[r]) for r in range(R))
        torch.testing.assert_close(out.double(), ref[offset:offset + len(xs[R])], rtol=tol, atol=tol)


def test_is_a_batch_norm_module_and_checks_its_input():
    sync = hvd.SyncBatchNorm(C)
    assert isinstance(sync, torch.nn.modules.batchnorm._BatchNorm)
    with pytest.raises(ValueError, match="expected at least 2D input"):
        sync(torch.zeros(C))


def test_trains_with_the_distributed_optimizer_like_one_process():
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, C), hvd.SyncBatchNorm(C), torch.nn.Linear(C, 1)).double()

    def data(step, r):
        g = torch.Generator().manual_seed(step * 10 + r)
        return torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(6, 1, generator=g, dtype=torch.float64)
    model = make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ref = make()
    ref[1] = reference_module(ref[1], 2)  # plain BatchNorm1d, same parameters
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        opt.zero_grad()
        x, y = data(step, R)
        # mean over the local batch, averaged over the equal-sized batches: the global batch's mean
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        ref_opt.zero_grad()
        xs, ys = zip(*[data(step, r) for r in range(N)])
        ((ref(torch.cat(xs)) - torch.cat(ys)) ** 2).mean().backward()
        ref_opt.step()
    for p, q in zip(model.state_dict().values(), ref.state_dict().values()):
        torch.testing.assert_close(p, q)
