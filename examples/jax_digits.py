"""Data-parallel JAX training (optax) on scikit-learn's bundled 8x8 digits (no download): Horovod's recipe on JAX
arrays, the whole step under jax.jit (the gradient allreduce runs inside the compiled program).

    tfringrun -np 2 python examples/jax_digits.py
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tfring.jax as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=15)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.002, help="single-rank learning rate (scaled by size)")
parser.add_argument("--target-accuracy", type=float, default=None, help="exit 1 if validation accuracy is lower")
args = parser.parse_args()

hvd.init()
digits = load_digits()
x_train, x_val, y_train, y_val = train_test_split(digits.data / 16.0, digits.target, test_size=0.2, random_state=0,
                                                  stratify=digits.target)
# Each rank trains on its own shard, cut to equal lengths so every rank runs as many steps.
per_rank = len(x_train) // hvd.size()
shard = slice(hvd.rank() * per_rank, (hvd.rank() + 1) * per_rank)
x_mine, y_mine = x_train[shard].astype(np.float32), y_train[shard]


def init_params(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (64, 64)) * 0.125, "b1": jnp.zeros(64),
            "w2": jax.random.normal(k2, (64, 10)) * 0.125, "b2": jnp.zeros(10)}


def logits(params, x):
    return jax.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def loss(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(logits(params, x), y).mean()


# Start every rank from rank 0's weights; scale the learning rate by the number of ranks (Horovod's recipe).
params = hvd.broadcast_parameters(init_params(jax.random.PRNGKey(hvd.rank())), root_rank=0)
tx = hvd.DistributedOptimizer(optax.adam(args.lr * hvd.size()))
opt_state = tx.init(params)


@jax.jit
def step(params, opt_state, x, y):
    grads = jax.grad(loss)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)  # gradients averaged over the ranks here
    return optax.apply_updates(params, updates), opt_state


rng = np.random.RandomState(hvd.rank())
for epoch in range(args.epochs):
    order = rng.permutation(per_rank)
    for i in range(0, per_rank - args.batch_size + 1, args.batch_size):
        idx = order[i:i + args.batch_size]
        params, opt_state = step(params, opt_state, x_mine[idx], y_mine[idx])
    correct = int((np.asarray(logits(params, x_val.astype(np.float32))).argmax(1) == y_val).sum())
    accuracy = float(hvd.allreduce(jnp.asarray(correct / len(y_val)), name="val_accuracy"))  # the same everywhere
    if hvd.rank() == 0:
        print("epoch %d: validation accuracy %.3f" % (epoch + 1, accuracy), flush=True)
if args.target_accuracy is not None and accuracy < args.target_accuracy:
    raise SystemExit("validation accuracy %.3f < target %.3f" % (accuracy, args.target_accuracy))
