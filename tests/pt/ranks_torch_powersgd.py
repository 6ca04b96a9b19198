"""tfring.torch.DistributedOptimizer(compression=Compression.powersgd(...)) on real ranks: every rank's parameters
equal those of one process that simulates all ranks' PowerSGD (its own float64 implementation of Vogels et al.:
P = avg(M Q), orthonormal P, Q = avg(M^T P), error = M - P Q^T) on the ranks' batches; the core reduces only the
low-rank factors and the uncompressed tensors; bad combinations fail on every rank."""
import pytest
import torch
import torch.nn.functional as F

import tfring.torch as hvd
from tfring.common.powersgd import PowerSGD

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)


def make_model():
    # 96 x 64 = 6144 elements: compressed; the biases (1-D) and the 3 x 96 layer (288 < min_size): sent as they are.
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.Tanh(), torch.nn.Linear(96, 3)).double()


def batch(step, r):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(8, 64, generator=g, dtype=torch.float64), torch.randint(0, 3, (8,), generator=g)


def grads_of(model, step, r):
    model.zero_grad()
    F.cross_entropy(model(batch(step, r)[0]), batch(step, r)[1]).backward()
    return [p.grad.clone() for p in model.parameters()]


def simulated(config, steps, lr):
    """One process, every rank's gradients and errors: the parameters PowerSGD must produce."""
    model = make_model()
    qs, errors = {}, {}
    for step in range(steps):
        per_rank = [grads_of(model, step, r) for r in range(N)]
        reduced = []
        for i, p in enumerate(model.parameters()):
            gs = [g[i] for g in per_rank]
            nm = config.matrix_shape(p.shape)
            if step < config.warmup_steps or nm is None:
                reduced.append(sum(gs) / N)
                continue
            q = qs.get(i, torch.as_tensor(config.initial_q(nm[1], i), dtype=torch.float64))
            ms = [g.reshape(nm) + errors.get((i, r), 0) for r, g in enumerate(gs)]
            basis, _ = torch.linalg.qr(sum(m @ q for m in ms) / N)
            qs[i] = sum(m.t() @ basis for m in ms) / N
            approx = basis @ qs[i].t()
            for r, m in enumerate(ms):
                errors[(i, r)] = m - approx
            reduced.append(approx.reshape(p.shape))
        with torch.no_grad():
            for p, g in zip(model.parameters(), reduced):
                p -= lr * g
    return model


@pytest.mark.parametrize("rank,warmup", [(1, 0), (2, 2)])
def test_matches_a_simulation_of_every_rank(rank, warmup):
    config = hvd.Compression.powersgd(rank=rank, warmup_steps=warmup)
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(), compression=config)
    for step in range(5):
        opt.zero_grad()
        F.cross_entropy(model(batch(step, R)[0]), batch(step, R)[1]).backward()
        opt.step()
    expected = simulated(config, 5, 0.5)
    for (name, p), q in zip(model.named_parameters(), expected.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-9, atol=1e-11,
                                   msg=lambda m: "rank %d, %s: %s" % (R, name, m))
        assert all(torch.equal(p.detach(), other) for other in hvd.allgather_object(p.detach())), name
    # The error feedback holds this rank's residual of the compressed weight only.
    assert list(opt._powersgd.errors) == ["0.weight"] and opt._powersgd.errors["0.weight"].shape == (96, 64)


def test_the_core_reduces_only_the_factors_and_the_small_tensors():
    config = hvd.Compression.powersgd(rank=2)
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), compression=config)
    sent = {}
    real = hvd.grouped_allreduce_

    def counting(tensors, name=None, **kwargs):
        sent.setdefault(name, []).append(sum(t.numel() for t in tensors))
        return real(tensors, name=name, **kwargs)
    import tfring.torch.optimizer as module
    module.grouped_allreduce_, saved = counting, module.grouped_allreduce_
    try:
        for step in range(3):
            opt.zero_grad()
            F.cross_entropy(model(batch(step, R)[0]), batch(step, R)[1]).backward()
            opt.step()
    finally:
        module.grouped_allreduce_ = saved
    # Round P: 96 x 2 + the biases (96, 3) and the 3 x 96 weight; round Q: 64 x 2.
    assert sent == {"powersgd.P": [96 * 2 + 96 + 288 + 3] * 3, "powersgd.Q": [64 * 2] * 3}, sent
    assert config.wire_elements([p.shape for p in model.parameters()]) == 96 * 2 + 96 + 288 + 3 + 64 * 2


def test_bad_settings_and_combinations_fail_on_every_rank():
    model = make_model()
    with pytest.raises(ValueError, match=r"rank=0 must be an int >= 1"):
        hvd.Compression.powersgd(rank=0)
    with pytest.raises(ValueError, match=r"warmup_steps=-1"):
        PowerSGD(warmup_steps=-1)
    with pytest.raises(ValueError, match=r"does not combine with groups=2"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), groups=2,
                                 compression=hvd.Compression.powersgd)
    for op in (hvd.Adasum, hvd.Max):
        with pytest.raises(ValueError, match=r"does not combine with op=.*Average or Sum only"):
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=op,
                                     compression=hvd.Compression.powersgd(rank=2))
    with pytest.raises(ValueError, match=r"a single collective takes Compression.none"):
        hvd.allreduce(torch.ones(3), name="psgd.bad", compression=hvd.Compression.powersgd())
