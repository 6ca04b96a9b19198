"""tfring.mxnet training helpers on real ranks: DistributedTrainer matches a single process on the concatenated
batch; with PowerSGD it ends where a simulation of every rank does; DistributedOptimizer averages gradients;
broadcast_parameters (also after deferred initialization)."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import tfring.mxnet as hvd
import powersgd_reference as reference
from mx_helpers import init

BATCH = 4  # rows per rank


def make_net(seed):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, activation="tanh", in_units=5), gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier())
    return net


def data(size, steps):
    rng = np.random.RandomState(7)
    x = rng.randn(steps, BATCH * size, 5).astype(np.float32)
    y = rng.randint(0, 3, size=(steps, BATCH * size)).astype(np.float32)
    return x, y


def train(net, trainer, xs, ys, batch_size):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for x, y in zip(xs, ys):
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
        loss.backward()
        trainer.step(batch_size)
    return [p.data().asnumpy() for _, p in sorted(net.collect_params().items())]


@pytest.mark.parametrize("kwargs", [{}, {"num_groups": 2}, {"gradient_predivide_factor": 2.0},
                                    {"optimizer": "adam", "optimizer_params": {"learning_rate": 0.01}}])
def test_trainer_matches_single_process(kwargs):
    rank, size = init()
    steps = 3
    xs, ys = data(size, steps)
    kwargs = dict(kwargs)
    optimizer = kwargs.pop("optimizer", "sgd")
    opt_params = kwargs.pop("optimizer_params", {"learning_rate": 0.5, "momentum": 0.9})
    # Distributed: rank r trains on its slice of every global batch, starting from root's weights.
    net = make_net(seed=100 + rank)  # different seeds: broadcast_parameters must make them equal
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = hvd.DistributedTrainer(net.collect_params(), optimizer, dict(opt_params), **kwargs)
    local = slice(rank * BATCH, (rank + 1) * BATCH)
    got = train(net, trainer, xs[:, local], ys[:, local], BATCH)
    # Reference: one process, root's initial weights, the concatenated batch.
    ref_net = make_net(seed=100)
    ref_trainer = gluon.Trainer(ref_net.collect_params(), optimizer, dict(opt_params), kvstore=None)
    want = train(ref_net, ref_trainer, xs, ys, BATCH * size)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_fp16_compressor_sends_half_and_restores_the_dtype():
    # 1 + 2**-12 has no fp16 form: what is sent is rounded to half, and decompress gives the original dtype back.
    x = mx.nd.array([1.0 + 2.0 ** -12, 0.1, 3.0], dtype=np.float32)
    sent, ctx = hvd.Compression.fp16.compress(x)
    assert sent.dtype == np.float16
    np.testing.assert_array_equal(sent.asnumpy(), x.asnumpy().astype(np.float16))
    back = hvd.Compression.fp16.decompress(sent, ctx)
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back.asnumpy(), x.asnumpy().astype(np.float16).astype(np.float32))
    assert back.asnumpy()[0] != x.asnumpy()[0]  # the rounding really happened
    ints = mx.nd.array([1, 2], dtype=np.int32)
    assert hvd.Compression.fp16.compress(ints) == (ints, None)  # integers travel as they are
    with pytest.raises(AttributeError, match=r"Compression.bf16: MXNet 1.9's bfloat16 exists only inside its MKLDNN"):
        hvd.Compression.bf16  # noqa: B018 (asked for, by name)
    assert not hasattr(hvd.Compression, "bf16")


def test_trainer_fp16_compression_close():
    rank, size = init()
    xs, ys = data(size, 2)
    net = make_net(seed=100)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.5},
                                     compression=hvd.Compression.fp16, prefix="fp16.")
    local = slice(rank * BATCH, (rank + 1) * BATCH)
    got = train(net, trainer, xs[:, local], ys[:, local], BATCH)
    ref_net = make_net(seed=100)
    want = train(ref_net, gluon.Trainer(ref_net.collect_params(), "sgd", {"learning_rate": 0.5}, kvstore=None),
                 xs, ys, BATCH * size)
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-2, atol=1e-2)


class Linear(gluon.Block):
    """x @ kernel + bias with the reference's (in, out) kernel (gluon's Dense keeps its transpose, which PowerSGD
    would approximate differently)."""

    def __init__(self, kernel, bias):
        super().__init__()
        self.kernel = self.params.get("kernel", shape=kernel.shape)
        self.bias = self.params.get("bias", shape=bias.shape)
        self.initialize()
        self.kernel.set_data(mx.nd.array(kernel))
        self.bias.set_data(mx.nd.array(bias))

    def forward(self, x):
        return mx.nd.dot(x, self.kernel.data()) + self.bias.data()


@pytest.mark.parametrize("rank_,warmup", [(1, 0), (2, 2)])
def test_trainer_powersgd_matches_a_simulation_of_every_rank(rank_, warmup):
    # tests/powersgd_reference.py simulates every rank in float64 numpy: the kernel (64 x 96) compressed, the bias
    # (1-D) sent as it is, SGD(0.5) on the mean squared error; each rank must end with its weights.
    rank, size = init()
    config = hvd.Compression.powersgd(rank=rank_, warmup_steps=warmup)
    kernel, bias = reference.initial_weights()
    net = Linear(kernel, bias)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": reference.LR},
                                     compression=config)
    for step in range(reference.STEPS):
        x, y = (mx.nd.array(a) for a in reference.batch(step, rank))
        with autograd.record():
            loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        trainer.step(1)
    # (The trainer orders the parameters by name: the kernel's first Q is that of position 1.)
    want = reference.simulated(config, size, kernel_index=[p.name for p in trainer._params].index(net.kernel.name))
    for got, w in zip((net.kernel.data().asnumpy(), net.bias.data().asnumpy()), want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-6)
    everyone = hvd.allgather_object(net.kernel.data().asnumpy())
    assert all(np.array_equal(other, everyone[0]) for other in everyone)
    with pytest.raises(ValueError, match=r"compression=PowerSGD\(rank=2.*does not combine with num_groups=2"):
        hvd.DistributedTrainer(make_net(seed=1).collect_params(), "sgd", {"learning_rate": 0.5},
                               compression=hvd.Compression.powersgd(rank=2), num_groups=2)


@pytest.mark.parametrize("num_groups", [0, 1])
def test_distributed_optimizer_averages(num_groups):
    rank, size = init()
    opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1), num_groups=num_groups)
    weights = [mx.nd.ones((3,)), mx.nd.ones((2, 2))]
    grads = [mx.nd.full((3,), rank + 1.0), mx.nd.full((2, 2), 2.0 * (rank + 1))]
    states = [opt.create_state(i, w) for i, w in enumerate(weights)]
    opt.update([0, 1], weights, grads, states)
    mean = np.mean([r + 1.0 for r in range(size)])
    np.testing.assert_allclose(weights[0].asnumpy(), 1 - 0.1 * mean, rtol=1e-6)
    np.testing.assert_allclose(weights[1].asnumpy(), 1 - 0.2 * mean, rtol=1e-6)
    # A single index goes through allreduce_ too (Module API's updater).
    w, g = mx.nd.zeros((2,)), mx.nd.full((2,), float(rank))
    opt.update(5, w, g, opt.create_state(5, w))
    np.testing.assert_allclose(w.asnumpy(), -0.1 * np.mean(range(size)), rtol=1e-6)


def test_broadcast_parameters_dict_and_deferred():
    rank, size = init()
    params = {"a": mx.nd.full((2, 2), float(rank)), "b": mx.nd.full((3,), 10.0 + rank)}
    hvd.broadcast_parameters(params, root_rank=size - 1, prefix="dict.")
    np.testing.assert_allclose(params["a"].asnumpy(), size - 1)
    np.testing.assert_allclose(params["b"].asnumpy(), 10.0 + size - 1)
    # Deferred initialization: the broadcast runs when the shapes are known (first forward).
    mx.random.seed(rank)
    net = gluon.nn.Dense(4)
    net.initialize(mx.init.Uniform())
    hvd.broadcast_parameters(net.collect_params(), root_rank=0, prefix="deferred.")
    net(mx.nd.ones((1, 6)))
    weight = net.weight.data().asnumpy()
    everyone = hvd.allgather(mx.nd.array(weight[None])).asnumpy()
    for r in range(size):
        np.testing.assert_array_equal(everyone[r], weight)
    with pytest.raises(ValueError, match="invalid params"):
        hvd.broadcast_parameters([mx.nd.ones(1)])
