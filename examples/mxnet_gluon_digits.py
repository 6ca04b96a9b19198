"""Data-parallel MXNet Gluon training on scikit-learn's bundled 8x8 digits (1,797 images, shipped inside the
scikit-learn wheel: no download). Horovod's mxnet recipe; only the import line differs. Needs mxnet 1.9.1, which
needs numpy < 1.24: run it in an environment with mxnet and without TensorFlow (README).

    mpirun -np 2 python examples/mxnet_gluon_digits.py      (or: tfringrun -np 2 python ...)
"""
import argparse

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tfring.mxnet as hvd  # was: import horovod.mxnet as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=15)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.002, help="single-rank learning rate (scaled by size)")
parser.add_argument("--target-accuracy", type=float, default=None, help="exit 1 if validation accuracy is lower")
args = parser.parse_args()

hvd.init()
mx.random.seed(1234 + hvd.rank())  # different initial weights per rank: broadcast_parameters makes them equal

digits = load_digits()
split = train_test_split(digits.images / 16.0, digits.target, test_size=0.2, random_state=0, stratify=digits.target)
x_train, x_val = (a[:, None].astype(np.float32) for a in split[:2])
y_train, y_val = (a.astype(np.float32) for a in split[2:])
# Each rank trains on its own shard, cut to equal sizes so every rank runs as many steps.
per_rank = len(x_train) // hvd.size()

net = gluon.nn.HybridSequential()
net.add(gluon.nn.Conv2D(32, 3, padding=1, activation="relu"), gluon.nn.Conv2D(32, 3, activation="relu"),
        gluon.nn.Flatten(), gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
net.initialize(mx.init.Xavier())
net.hybridize()
params = net.collect_params()
# Shapes are inferred at the first forward: the broadcast then runs from the deferred initialization.
hvd.broadcast_parameters(params, root_rank=0)
trainer = hvd.DistributedTrainer(params, "adam", {"learning_rate": args.lr * hvd.size()})
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()


def validation_accuracy():
    """Each rank scores its share of the validation set; the sums over ranks give the exact accuracy."""
    xs, ys = x_val[hvd.rank()::hvd.size()], y_val[hvd.rank()::hvd.size()]
    pred = net(mx.nd.array(xs)).argmax(axis=1).asnumpy()
    counts = mx.nd.array([float((pred == ys).sum()), float(len(ys))], dtype=np.float64)
    correct, total = hvd.allreduce(counts, op=hvd.Sum, name="val_counts").asnumpy().tolist()
    return correct / total


rng = np.random.RandomState(0)
for epoch in range(args.epochs):
    order = rng.permutation(len(x_train))  # the same permutation on every rank: disjoint shards
    shard = order[hvd.rank() * per_rank:(hvd.rank() + 1) * per_rank]
    for start in range(0, per_rank, args.batch_size):
        idx = shard[start:start + args.batch_size]
        xb, yb = mx.nd.array(x_train[idx]), mx.nd.array(y_train[idx])
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(len(idx))
    loss = hvd.allreduce(loss.mean(), name="train_loss")  # averaged over ranks
    acc = validation_accuracy()
    if hvd.rank() == 0:
        print("epoch %d: loss %.4f, validation accuracy %.4f" % (epoch + 1, loss.asscalar(), acc))

if hvd.rank() == 0:
    print("validation accuracy %.4f on %d ranks" % (acc, hvd.size()))
mx.nd.waitall()
if args.target_accuracy is not None and acc < args.target_accuracy:
    raise SystemExit("validation accuracy %.4f below target %.4f" % (acc, args.target_accuracy))
