"""tfring.torch's broadcast_parameters, broadcast_optimizer_state, broadcast_object and allgather_object on real
ranks: every rank ends with the root's values (a diverged rank is restored exactly and then trains in step)."""
import pytest
import torch
import torch.nn.functional as F

import tfring.torch as hvd

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()
LAST = N - 1
torch.set_num_threads(1)


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                               torch.nn.Linear(6, 3)).double()


def data(step, r):
    g = torch.Generator().manual_seed(100 * step + r)
    return torch.randn(8, 5, generator=g, dtype=torch.float64), torch.randint(0, 3, (8,), generator=g)


def train(model, opt, steps, seed_rank):
    for step in range(steps):
        opt.zero_grad()
        x, y = data(step, seed_rank)
        F.cross_entropy(model(x), y).backward()
        opt.step()


def assert_state_equal(a, b):
    """Two state_dict()s (of models or optimizers) hold the same values, tensors compared exactly."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a, key=str) == sorted(b, key=str), (a, b)
        for k in a:
            assert_state_equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            assert_state_equal(x, y)
    elif torch.is_tensor(a):
        assert torch.is_tensor(b), (a, b)
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    else:
        assert a == b, (a, b)


@pytest.mark.parametrize("root", [0, LAST])
@pytest.mark.parametrize("form", ["state_dict", "named_parameters", "parameters"])
def test_broadcast_parameters_overwrites_in_place(root, form):
    model = make_model(seed=R)
    model.train()
    model(torch.ones(4, 5, dtype=torch.float64))  # running statistics and num_batches_tracked differ by rank
    before = [p for p in model.parameters()]
    expected = make_model(seed=root)
    expected(torch.ones(4, 5, dtype=torch.float64))
    params = {"state_dict": model.state_dict, "named_parameters": model.named_parameters,
              "parameters": model.parameters}[form]()
    hvd.broadcast_parameters(params, root_rank=root)
    assert all(p is q for p, q in zip(model.parameters(), before))
    if form == "state_dict":
        assert_state_equal(model.state_dict(), expected.state_dict())
    else:
        for p, q in zip(model.parameters(), expected.parameters()):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=0)
        assert all(p.requires_grad for p in model.parameters())


def test_broadcast_parameters_rejects_other_types():
    with pytest.raises(ValueError, match="invalid params of type: int"):
        hvd.broadcast_parameters(3, root_rank=0)


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.05 * (R + 1), momentum=0.9, nesterov=R == 0),
    lambda ps: torch.optim.Adam(ps, lr=0.01 * (R + 1), betas=(0.8 + 0.01 * R, 0.99), amsgrad=True),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1 * (R + 1)),
], ids=["sgd", "adam_amsgrad", "adamw"])
def test_diverged_ranks_are_restored_exactly_then_train_in_step(make_opt):
    model = make_model(seed=R)
    opt = make_opt(model.parameters())
    train(model, opt, steps=R + 2, seed_rank=R)  # state, step counts and hyperparameters all differ by rank
    hvd.broadcast_parameters(model.state_dict(), root_rank=LAST)
    hvd.broadcast_optimizer_state(opt, root_rank=LAST)
    gathered = hvd.allgather_object((model.state_dict(), opt.state_dict()))
    for model_state, opt_state in gathered:
        assert_state_equal(model_state, gathered[LAST][0])
        assert_state_equal(opt_state, gathered[LAST][1])
    train(model, opt, steps=3, seed_rank=LAST)  # the same data everywhere: the ranks stay identical
    for model_state, opt_state in hvd.allgather_object((model.state_dict(), opt.state_dict())):
        assert_state_equal(model_state, model.state_dict())
        assert_state_equal(opt_state, opt.state_dict())


OPTIMIZERS = sorted(c.__name__ for c in torch.optim.Optimizer.__subclasses__()
                    if c.__module__.startswith("torch.optim") and c.__name__ != "SparseAdam")  # (sparse gradients)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_torch_optimizer_is_restored_exactly(name):
    """Horovod refuses LBFGS; its nested state (lists of tensors, floats) travels here as any other entry."""
    model = make_model(seed=R)
    params = [p for p in model.parameters() if name != "Muon" or p.dim() == 2]  # Muon takes matrices only
    opt = getattr(torch.optim, name)(params, lr=0.01 * (R + 1))

    def run(steps, seed_rank):
        for step in range(steps):
            x, y = data(step, seed_rank)

            def closure():
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                return loss
            opt.step(closure)
    run(R + 2, R)
    hvd.broadcast_parameters(model.state_dict(), root_rank=LAST)
    hvd.broadcast_optimizer_state(opt, root_rank=LAST)
    gathered = hvd.allgather_object(opt.state_dict())
    assert_state_equal(opt.state_dict(), gathered[LAST])
    run(2, LAST)
    for model_state, opt_state in hvd.allgather_object((model.state_dict(), opt.state_dict())):
        assert_state_equal(model_state, model.state_dict())
        assert_state_equal(opt_state, opt.state_dict())


@pytest.mark.parametrize("root_has_state", [True, False])
def test_state_only_some_ranks_have_is_created_or_removed(root_has_state):
    model = make_model(seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if (R == 0) == root_has_state:
        train(model, opt, steps=2, seed_rank=R)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert len(opt.state) == (len(list(model.parameters())) if root_has_state else 0)
    root = hvd.broadcast_object(opt.state_dict(), root_rank=0)
    assert_state_equal(opt.state_dict(), root)


class CountingSGD(torch.optim.SGD):
    """Keeps non-tensor per-parameter state (an int and a string), as some optimizers do."""

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["count"] = state.get("count", 0) + 1
                state["tag"] = "rank%d" % R
        return super().step(closure)


def test_non_tensor_state_and_several_param_groups_travel():
    model = make_model(seed=0)
    opt = CountingSGD([{"params": model[0].parameters(), "lr": 0.1 * (R + 1)},
                       {"params": model[3].parameters(), "lr": 0.5, "momentum": 0.1 * R}], lr=0.2, momentum=0.5)
    train(model, opt, steps=R + 1, seed_rank=R)
    hvd.broadcast_optimizer_state(opt, root_rank=LAST)
    assert [g["lr"] for g in opt.param_groups] == [0.1 * N, 0.5]
    assert opt.param_groups[1]["momentum"] == 0.1 * LAST
    assert {opt.state[p]["count"] for p in model[0].parameters()} == {N}
    assert {opt.state[p]["tag"] for p in model[3].parameters()} == {"rank%d" % LAST}
    assert all(p not in opt.state for p in model[1].parameters())  # not in the optimizer


def test_broadcast_optimizer_state_of_a_distributed_optimizer_needs_no_step():
    model = make_model(seed=R)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01 * (R + 1), momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.01 and len(opt.state) == 0
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in model.parameters())  # as Horovod leaves them
    train(model, opt, steps=2, seed_rank=R)  # each rank its own data: averaged gradients keep parameters equal
    params = [p.detach() for p in model.parameters()]  # (BatchNorm's running statistics are local)
    for others in hvd.allgather_object(params):
        assert_state_equal(others, params)


class Point:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, Point) and other.x == self.x


def test_fresh_optimizer_state_gives_zero_gradients_to_parameters_that_need_one():
    # Horovod's test_broadcast_state_no_grad: a parameter without grad (an int index) next to one with it; after
    # broadcasting a fresh optimizer's state the latter has a zero gradient (Horovod's state-creating step leaves
    # one), the former none, and training goes on alike everywhere.
    index = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32), requires_grad=False)
    torch.manual_seed(R)
    weight = torch.nn.Parameter(torch.rand(4, dtype=torch.float64))
    opt = torch.optim.SGD([index, weight], lr=0.1, weight_decay=1e-6, momentum=0.9, nesterov=True)
    opt = hvd.DistributedOptimizer(opt, named_parameters=[("index", index), ("weight", weight)])
    hvd.broadcast_parameters({"index": index, "weight": weight}, root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert index.grad is None
    assert torch.equal(weight.grad, torch.zeros(4, dtype=torch.float64))
    for step in range(2):
        opt.zero_grad()
        (torch.index_select(weight, 0, index.long()) * (R + step + 1)).sum().backward()
        opt.step()
    assert hvd.allgather_object(weight.detach().tolist()) == [weight.detach().tolist()] * N


@pytest.mark.parametrize("root", [0, LAST])
def test_broadcast_object_gives_every_rank_the_roots_object(root):
    obj = {"rank": R, "point": Point(R), "big": bytes([R]) * 300000, "fn": lambda v: v + R} if R == root else None
    out = hvd.broadcast_object(obj, root_rank=root, name="bcast_obj_%d" % root)
    assert out["rank"] == root and out["point"] == Point(root) and out["big"] == bytes([root]) * 300000
    assert out["fn"](1) == 1 + root
    if R == root:
        assert out is obj
    assert hvd.broadcast_object(torch.arange(R, R + 3)).tolist() == [0, 1, 2]


def test_allgather_object_gives_every_rank_every_object():
    objs = hvd.allgather_object({"rank": R, "blob": "x" * (1000 * R)}, name="gather_obj")
    assert objs == [{"rank": r, "blob": "x" * (1000 * r)} for r in range(N)]
    assert hvd.allgather_object(None) == [None] * N
    assert hvd.allgather_object(R * 2, process_set=hvd.global_process_set) == [2 * r for r in range(N)]
