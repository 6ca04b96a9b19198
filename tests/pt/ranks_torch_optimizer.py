"""tfring.torch.DistributedOptimizer on real ranks: after several steps every rank's parameters equal those of one
process training the same model on the concatenation of all ranks' batches (SGD with momentum, Adam, gradient
accumulation, groups, predivide, fp16 compression, sparse gradients); bad arguments fail on every rank."""
import copy
import os

import pytest
import torch
import torch.nn.functional as F

import tfring.torch as hvd
import tfring.torch.optimizer as hvd_optimizer

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)
BATCH, STEPS = 4, 4


def make_model(seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(dtype)


def batch(step, r, rows=BATCH, dtype=torch.float64):
    """Rank r's batch of a step: every rank can build every other rank's."""
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(rows, 5, generator=g, dtype=dtype), torch.randint(0, 3, (rows,), generator=g)


def global_batch(step, rows=BATCH, dtype=torch.float64):
    xs, ys = zip(*[batch(step, r, rows, dtype) for r in range(N)])
    return torch.cat(xs), torch.cat(ys)


def loss_fn(model, x, y):
    return F.cross_entropy(model(x), y)


def reference(make_opt, steps=STEPS, dtype=torch.float64, model=None):
    """One process, the global batch: what every rank's model must hold after `steps` distributed steps."""
    model = make_model(dtype=dtype) if model is None else model
    opt = make_opt(model.parameters())
    for step in range(steps):
        opt.zero_grad()
        loss_fn(model, *global_batch(step, dtype=dtype)).backward()
        opt.step()
    return model


def train(opt, model, steps=STEPS, dtype=torch.float64):
    for step in range(steps):
        opt.zero_grad()
        loss_fn(model, *batch(step, R, dtype=dtype)).backward()
        opt.step()
    return model


def assert_same_params(model, expected, **tol):
    for (name, p), q in zip(model.named_parameters(), expected.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), msg=lambda m: "rank %d, %s: %s" % (R, name, m), **tol)


SGD = lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)  # noqa: E731
ADAM = lambda params: torch.optim.Adam(params, lr=0.01)  # noqa: E731


@pytest.mark.parametrize("make_opt", [SGD, ADAM], ids=["sgd_momentum", "adam"])
def test_equals_one_process_on_the_global_batch(make_opt):
    model = make_model()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters())
    assert isinstance(opt, type(make_opt([torch.zeros(1, requires_grad=True)])))
    assert_same_params(train(opt, model), reference(make_opt))


def test_without_named_parameters_positions_name_the_allreduces():
    model = make_model()
    groups = [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.05}]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(groups, lr=0.1))
    names = sorted(opt._parameter_names.values())
    assert names == ["allreduce.noname.0.0", "allreduce.noname.0.1", "allreduce.noname.1.0", "allreduce.noname.1.1"]
    expected = make_model()
    assert_same_params(train(opt, model), reference(
        lambda _: torch.optim.SGD([{"params": expected[0].parameters()},
                                   {"params": expected[2].parameters(), "lr": 0.05}], lr=0.1), model=expected))


def test_parameters_whose_requires_grad_changes_between_steps():
    """A GAN's pattern (as Horovod's test): each optimizer steps only while its model trains."""
    torch.manual_seed(0)
    gen, disc = torch.nn.Linear(5, 4).double(), torch.nn.Linear(4, 1).double()
    gen_opt = hvd.DistributedOptimizer(torch.optim.SGD(gen.parameters(), lr=0.1),
                                       named_parameters=gen.named_parameters(prefix="gen"))
    disc_opt = hvd.DistributedOptimizer(torch.optim.SGD(disc.parameters(), lr=0.1),
                                        named_parameters=disc.named_parameters(prefix="disc"))
    for step in range(4):
        train_gen = step % 2 == 0
        for p in gen.parameters():
            p.requires_grad_(train_gen)
        for p in disc.parameters():
            p.requires_grad_(not train_gen)
        gen_opt.zero_grad()
        disc_opt.zero_grad()
        disc(gen(batch(step, R)[0])).sum().backward()
        assert all((p.grad is not None) == train_gen for p in gen.parameters())
        assert all((p.grad is not None) != train_gen for p in disc.parameters())
        (gen_opt if train_gen else disc_opt).step()
    for p in list(gen.parameters()) + list(disc.parameters()):
        assert all(torch.equal(p.detach(), q) for q in hvd.allgather_object(p.detach()))


def test_wrapping_keeps_the_optimizer_state_and_hyperparameters():
    model = make_model()
    base = ADAM(model.parameters())
    loss_fn(model, *batch(0, 0)).backward()
    base.step()  # the same step on every rank: state exists before wrapping
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    assert opt.state is base.state and opt.param_groups is base.param_groups
    assert int(opt.state[model[0].weight]["step"]) == 1
    opt.zero_grad()
    loss_fn(model, *batch(1, R)).backward()
    opt.step()
    assert int(opt.state[model[0].weight]["step"]) == 2


def test_backward_passes_per_step_accumulates_locally():
    make_opt = SGD
    model = make_model()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2)
    for step in range(STEPS):
        opt.zero_grad()
        x, y = batch(step, R)
        for half in (slice(0, BATCH // 2), slice(BATCH // 2, BATCH)):
            (loss_fn(model, x[half], y[half]) / 2).backward()
            if half.start == 0:
                with pytest.raises(AssertionError, match="zero_grad"):
                    opt.zero_grad()  # between the passes: refused
        opt.step()
    assert_same_params(model, reference(make_opt))


def test_more_backward_passes_than_declared_fail_clearly():
    model = make_model()
    opt = hvd.DistributedOptimizer(SGD(model.parameters()), named_parameters=model.named_parameters())
    loss_fn(model, *batch(0, R)).backward()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        loss_fn(model, *batch(1, R)).backward()
    opt.synchronize()  # the first pass's allreduces, submitted on every rank, complete


@pytest.mark.parametrize("groups", [2, "list"], ids=["int", "list"])
def test_groups_use_grouped_allreduces(groups, monkeypatch):
    calls = []
    real = hvd_optimizer.grouped_allreduce_async_

    def counting(tensors, **kwargs):
        calls.append((len(tensors), kwargs["name"]))
        return real(tensors, **kwargs)
    monkeypatch.setattr(hvd_optimizer, "grouped_allreduce_async_", counting)
    model = make_model()
    if groups == "list":
        groups = [[model[0].weight, model[2].bias]]  # the other two parameters go alone
    opt = hvd.DistributedOptimizer(SGD(model.parameters()), named_parameters=model.named_parameters(),
                                   groups=groups)
    assert_same_params(train(opt, model), reference(SGD))
    sizes = sorted(n for n, _ in calls[:len(calls) // STEPS])
    assert len(calls) % STEPS == 0 and sizes == ([2, 2] if groups == 2 else [1, 1, 2]), calls


def test_num_groups_is_the_deprecated_spelling_of_groups():
    model = make_model()
    with pytest.warns(DeprecationWarning, match="groups"):
        opt = hvd.DistributedOptimizer(SGD(model.parameters()), named_parameters=model.named_parameters(),
                                       num_groups=3)
    assert_same_params(train(opt, model), reference(SGD))


def test_gradient_predivide_factor_splits_the_average(monkeypatch):
    seen = []
    real = hvd_optimizer.allreduce_async_

    def recording(tensor, **kwargs):
        seen.append((kwargs["prescale_factor"], kwargs["postscale_factor"]))
        return real(tensor, **kwargs)
    monkeypatch.setattr(hvd_optimizer, "allreduce_async_", recording)
    model = make_model()
    opt = hvd.DistributedOptimizer(ADAM(model.parameters()), named_parameters=model.named_parameters(),
                                   gradient_predivide_factor=4.0)
    assert_same_params(train(opt, model), reference(ADAM))
    assert set(seen) == {(0.25, 4.0)}


@pytest.mark.parametrize("kind,half,tol", [("fp16", torch.float16, 2e-3), ("bf16", torch.bfloat16, 2e-2)])
def test_16_bit_compression_sends_16_bits_and_restores_the_dtype(monkeypatch, kind, half, tol):
    dtypes = set()
    real = hvd_optimizer.allreduce_async_

    def recording(tensor, **kwargs):
        dtypes.add(tensor.dtype)
        return real(tensor, **kwargs)
    monkeypatch.setattr(hvd_optimizer, "allreduce_async_", recording)
    model = make_model(dtype=torch.float32)
    opt = hvd.DistributedOptimizer(SGD(model.parameters()), named_parameters=model.named_parameters(),
                                   compression=getattr(hvd.Compression, kind))
    train(opt, model, dtype=torch.float32)
    assert dtypes == {half}
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    assert_same_params(model, reference(SGD, dtype=torch.float32), rtol=tol, atol=tol)


def test_sum_op_adds_the_gradients():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    loss_fn(model, *batch(0, R)).backward()
    opt.synchronize()
    expected = make_model()
    for r in range(N):
        loss_fn(expected, *batch(0, r)).backward()
    for p, q in zip(model.parameters(), expected.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    with opt.skip_synchronize():
        opt.step()


def test_synchronize_then_clip_then_step_in_skip_synchronize():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters())
    expected = make_model()
    ref_opt = torch.optim.SGD(expected.parameters(), lr=0.5)
    for step in range(2):
        opt.zero_grad()
        loss_fn(model, *batch(step, R)).backward()
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        with opt.skip_synchronize():
            opt.step()
        ref_opt.zero_grad()
        loss_fn(expected, *global_batch(step)).backward()
        torch.nn.utils.clip_grad_norm_(expected.parameters(), 0.05)
        ref_opt.step()
    assert_same_params(model, expected)
    opt.zero_grad()
    loss_fn(model, *batch(5, R)).backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()  # synchronizes again (nothing left to reduce) and warns, as Horovod


def test_a_parameter_unused_on_some_ranks_is_averaged_with_zeros():
    torch.manual_seed(0)
    trunk, head_a, head_b = [torch.nn.Linear(*shape).double() for shape in ((5, 4), (4, 3), (4, 3))]
    ref_trunk, ref_a = copy.deepcopy(trunk), copy.deepcopy(head_a)
    named = [("%s.%s" % (prefix, k), v) for prefix, module in (("trunk", trunk), ("a", head_a), ("b", head_b))
             for k, v in module.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in named], lr=0.1), named_parameters=named)
    x, y = batch(0, R)
    F.cross_entropy((head_a if R == 0 else head_b)(trunk(x)), y).backward()  # head a only on rank 0
    opt.synchronize()
    x0, y0 = batch(0, 0)
    F.cross_entropy(ref_a(ref_trunk(x0)), y0).backward()
    torch.testing.assert_close(head_a.weight.grad, ref_a.weight.grad / N)
    with opt.skip_synchronize():
        opt.step()


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_embedding_gradients(sparse_as_dense):
    def make():
        torch.manual_seed(3)
        return torch.nn.Embedding(10, 4, sparse=True).double()

    def ids(step, r):
        return torch.tensor([(3 * step + r) % 10, (step + 2 * r) % 10, 7])
    model = make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(), sparse_as_dense=sparse_as_dense)
    expected = make()
    ref_opt = torch.optim.SGD(expected.parameters(), lr=0.5)
    for step in range(3):
        opt.zero_grad()
        (model(ids(step, R)) ** 2).sum().backward()
        opt.step()
        assert model.weight.grad.is_sparse
        ref_opt.zero_grad()
        sum((expected(ids(step, r)) ** 2).sum() for r in range(N)).div(N).backward()
        ref_opt.step()
    torch.testing.assert_close(model.weight.detach(), expected.weight.detach())


def test_load_state_dict_forgets_an_unfinished_accumulation():
    model = make_model()
    opt = hvd.DistributedOptimizer(SGD(model.parameters()), named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2)
    saved = opt.state_dict()
    loss_fn(model, *batch(9, R)).backward()  # one of two passes: nothing submitted yet
    opt.load_state_dict(saved)
    opt.set_backward_passes_per_step(1)
    assert_same_params(train(opt, model), reference(SGD))  # train() begins with zero_grad(): allowed again


def names_of(model):
    return list(model.named_parameters())


@pytest.mark.parametrize("case,error,match", [
    ("duplicate", ValueError, "unique.*duplicates: 0.weight"),
    ("unnamed", ValueError, r"were not named: param_groups\[0\]\['params'\]\[2\]"),
    ("not_tuples", ValueError, "sequence of tuples"),
    ("groups_zero", ValueError, "groups should be"),
    ("groups_repeat", ValueError, "only appear once"),
    ("groups_not_tensors", ValueError, "torch.Tensor"),
    ("passes", ValueError, "backward_passes_per_step must be > 0"),
    ("predivide_sum", ValueError, "gradient_predivide_factor not supported with op != Average"),
    ("twice", ValueError, "already a DistributedOptimizer"),
])
def test_bad_arguments_fail_on_every_rank(case, error, match):
    model = make_model()
    named = names_of(model)
    kwargs = {"named_parameters": named}
    opt = SGD(model.parameters())
    if case == "duplicate":
        kwargs["named_parameters"] = [("0.weight", p) for _, p in named]
    elif case == "unnamed":
        kwargs["named_parameters"] = named[:2] + named[3:]
    elif case == "not_tuples":
        kwargs["named_parameters"] = [p for _, p in named]
    elif case == "groups_zero":
        kwargs["groups"] = 0
    elif case == "groups_repeat":
        kwargs["groups"] = [[named[0][1]], [named[0][1]]]
    elif case == "groups_not_tensors":
        kwargs["groups"] = [["0.weight"]]
    elif case == "passes":
        kwargs["backward_passes_per_step"] = 0
    elif case == "predivide_sum":
        kwargs.update(op=hvd.Sum, gradient_predivide_factor=2.0)
    elif case == "twice":
        opt = hvd.DistributedOptimizer(opt, named_parameters=named)
    with pytest.raises(error, match=match):
        hvd.DistributedOptimizer(opt, **kwargs)


@pytest.mark.skipif(os.environ.get("TFRING_DYNAMIC_PROCESS_SETS") != "1", reason="needs TFRING_DYNAMIC_PROCESS_SETS=1")
def test_process_set_averages_over_its_ranks_only():
    members = [0, 1] if N > 2 else [0]  # at np=2, [0, 1] would be the global set
    pair = hvd.add_process_set(members)
    try:
        model = make_model()
        opt = hvd.DistributedOptimizer(ADAM(model.parameters()), named_parameters=model.named_parameters(),
                                       process_set=pair)
        train(opt, model)
        expected = make_model()
        ref_opt = ADAM(expected.parameters())
        for step in range(STEPS):
            ref_opt.zero_grad()
            xs, ys = zip(*[batch(step, r) for r in (members if R in members else [R])])
            loss_fn(expected, torch.cat(xs), torch.cat(ys)).backward()
            ref_opt.step()
        assert_same_params(model, expected)  # a rank outside the set trains alone
    finally:
        hvd.remove_process_set(pair)


def adasum(a, b):
    """The Adasum of two ranks' tensors (Maleki et al.): orthogonal ones add up, equal ones count once."""
    dot = (a * b).sum()
    return (1 - dot / (2 * (a * a).sum())) * a + (1 - dot / (2 * (b * b).sum())) * b


@pytest.mark.skipif(N != 2, reason="the reference replays two ranks (Adasum needs a power of two: np=2 here)")
def test_adasum_combines_every_ranks_step_with_adasum():
    # Horovod's delta optimizer: each rank steps (SGD with momentum) on its own batch, the parameters' changes are
    # combined with Adasum. One process replays both ranks (each replica with its own momentum) to check it.
    model = make_model()
    opt = hvd.DistributedOptimizer(SGD(model.parameters()), named_parameters=model.named_parameters(), op=hvd.Adasum)
    replicas = [make_model() for _ in range(N)]
    replica_opts = [SGD(m.parameters()) for m in replicas]
    shared = [p.detach().clone() for p in model.parameters()]
    for step in range(3):
        opt.zero_grad()
        loss_fn(model, *batch(step, R)).backward()
        opt.step()
        deltas = []
        for r, (m, o) in enumerate(zip(replicas, replica_opts)):
            with torch.no_grad():
                for q, p in zip(m.parameters(), shared):
                    q.copy_(p)
            o.zero_grad()
            loss_fn(m, *batch(step, r)).backward()
            o.step()
            deltas.append([q.detach() - p for q, p in zip(m.parameters(), shared)])
        shared = [p + adasum(a, b) for p, a, b in zip(shared, *deltas)]
        for (name, p), q in zip(model.named_parameters(), shared):
            torch.testing.assert_close(p.detach(), q, msg=lambda m: "rank %d, step %d, %s: %s" % (R, step, name, m))


@pytest.mark.skipif(N & (N - 1) == 0, reason="power-of-two ranks run Adasum")
def test_adasum_over_other_rank_counts_fails_on_every_rank():
    model = make_model()
    with pytest.raises(NotImplementedError, match="power-of-two number of ranks in the process set, got 3"):
        hvd.DistributedOptimizer(SGD(model.parameters()), named_parameters=model.named_parameters(), op=hvd.Adasum)


def test_adasum_optimizer_has_nothing_to_skip():
    model = make_model()
    if N & (N - 1):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    opt = hvd.DistributedOptimizer(SGD(model.parameters()), named_parameters=model.named_parameters(), op=hvd.Adasum)
    with pytest.raises(AssertionError, match="not supported when using Adasum"):
        with opt.skip_synchronize():
            pass
