"""Rank-side checks of tfring.torch.elastic on one rank (run by tests/elastic/test_torch_elastic.py under mpirun -np 1):
TorchState's commit/restore really brings parameters, buffers, Adam's state, an LR scheduler, a sampler and
plain attributes back; ElasticSampler's sharding and re-sharding at 2 and 3 ranks."""
import sys

import torch

import tfring.torch as hvd
from tfring.torch.elastic.sampler import ElasticSampler, epoch_order, partition

hvd.init()


def make():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters())
    return model, optimizer


def train_steps(model, optimizer, n):
    for i in range(n):
        x = torch.randn(16, 4) + i
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
        optimizer.step()


def snapshot(model, optimizer):
    params = {k: v.clone() for k, v in model.state_dict().items()}
    opt = {i: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
           for i, s in optimizer.state_dict()["state"].items()}
    return params, opt


def assert_equal_snapshots(a, b):
    assert a[0].keys() == b[0].keys() and a[1].keys() == b[1].keys()
    for k in a[0]:
        torch.testing.assert_close(a[0][k], b[0][k], rtol=0, atol=0)
    for i in a[1]:
        for k in a[1][i]:
            torch.testing.assert_close(a[1][i][k], b[1][i][k], rtol=0, atol=0)


def test_commit_restore_brings_model_and_optimizer_back():
    model, optimizer = make()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    dataset = list(range(10))
    sampler = ElasticSampler(dataset, shuffle=False)
    state = hvd.elastic.TorchState(model, optimizer, scheduler=scheduler, sampler=sampler, epoch=0, tag="a")
    assert sorted(state._handlers) == ["model", "optimizer", "sampler", "scheduler"]
    state.sync()
    train_steps(model, optimizer, 3)
    scheduler.step()
    sampler.record_indices([0, 1, 2])
    state.epoch, state.tag = 1, "b"
    state.commit()
    committed = snapshot(model, optimizer)
    assert int(committed[1][0]["step"]) == 3
    for _ in range(2):  # twice: a restore must not let later steps change the kept copy
        train_steps(model, optimizer, 4)
        scheduler.step()
        sampler.record_indices([3, 4])
        state.epoch, state.tag = 2, "c"
        after = snapshot(model, optimizer)
        assert int(after[1][0]["step"]) == 7
        assert not torch.equal(after[0]["0.weight"], committed[0]["0.weight"])
        assert not torch.equal(after[0]["1.running_mean"], committed[0]["1.running_mean"])
        state.restore()
        assert_equal_snapshots(snapshot(model, optimizer), committed)
        assert (state.epoch, state.tag) == (1, "b")
        assert scheduler.last_epoch == 1 and optimizer.param_groups[0]["lr"] == 0.025
        assert sampler.processed_indices == {0, 1, 2} and sampler.indices == list(range(3, 10))
    # The optimizer still trains the same parameter objects after a restore.
    before = model[0].weight.detach().clone()
    train_steps(model, optimizer, 1)
    assert not torch.equal(before, model[0].weight)


def test_assigning_a_handled_attribute_tracks_the_new_object():
    model, optimizer = make()
    state = hvd.elastic.TorchState(model, optimizer)
    other, _ = make()
    with torch.no_grad():
        other[0].weight.fill_(3.0)
    state.model = other
    assert state.model is other and state._handlers["model"].value is other
    with torch.no_grad():
        other[0].weight.fill_(5.0)
    state.restore()
    assert torch.all(other[0].weight == 3.0)


def test_plain_object_state_without_tensorflow_broadcast():
    state = hvd.elastic.ObjectState(epoch=3, batch=1)
    state.sync()
    state.epoch = 4
    state.commit()
    state.epoch = 9
    state.restore()
    assert state.epoch == 4


def shards(sampler, n):
    out = []
    for r in range(n):
        sampler._repartition(n, r)
        out.append(list(sampler))
    return out


def test_sampler_shards_cover_the_epoch():
    dataset = list(range(23))
    sampler = ElasticSampler(dataset, shuffle=True, seed=5)
    assert sampler.num_replicas == 1 and sorted(sampler) == list(range(23))
    order = epoch_order(23, True, 5, 0)
    assert sorted(order) == list(range(23)) and order != list(range(23))
    assert epoch_order(23, True, 5, 1) != order  # another epoch, another shuffle
    for n in (2, 3):
        parts = shards(sampler, n)
        assert all(len(p) == -(-23 // n) for p in parts) and len(sampler) == -(-23 // n)
        flat = [i for p in parts for i in p]
        assert set(flat) == set(range(23))
        assert len(flat) - 23 == n * len(parts[0]) - 23  # only the padding repeats
        assert parts[0] == order[0::n][:len(parts[0])]


def test_sampler_reshards_only_the_unprocessed_indices():
    dataset = list(range(30))
    for before, after in ((3, 2), (2, 3)):
        ranks = [ElasticSampler(dataset, shuffle=True, seed=1) for _ in range(before)]
        processed = set()
        for r, sampler in enumerate(ranks):  # each rank ran 2 batches of 4
            sampler._repartition(before, r)
            sampler.record_batch(0, 4)
            sampler.record_batch(1, 4)
            processed |= set(list(sampler)[:8])
            assert sampler.processed_indices == set(list(sampler)[:8])
        assert len(processed) == 8 * before  # disjoint shards
        # What SamplerStateHandler commits: the union of every rank's processed indices.
        union = set().union(*(s.state_dict()["processed_indices"] for s in ranks))
        assert union == processed
        sampler = ElasticSampler(dataset, shuffle=True, seed=1)
        sampler.load_state_dict({"epoch": 0, "processed_indices": union})
        parts = shards(sampler, after)
        flat = [i for p in parts for i in p]
        remaining = set(range(30)) - processed
        assert set(flat) == remaining
        assert len(flat) == after * -(-len(remaining) // after)
        if len(remaining) % after == 0:
            assert sorted(flat) == sorted(remaining)  # no padding: each index exactly once
        assert sampler.remaining_indices == [i for i in epoch_order(30, True, 1, 0) if i not in processed]
        sampler.set_epoch(1)
        assert sampler.processed_indices == set() and len(sampler.remaining_indices) == 30


def test_partition_pads_short_remainders():
    assert partition([7], 3, 2) == [7]
    assert [partition([1, 2, 3, 4], 3, r) for r in range(3)] == [[1, 4], [2, 1], [3, 2]]
    assert partition([], 2, 1) == []


def test_no_tensorflow_imported():
    # Last: everything above (TorchState, ObjectState, sampler, commits) ran without importing TensorFlow.
    assert not [m for m in sys.modules if m == "tensorflow" or m.startswith("tensorflow.")]
