"""Custom training loop with DistributedGradientTape on scikit-learn's bundled digits (no download).

    tfringrun -np 2 python examples/tf2_custom_loop.py
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import tfring as hvd  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()

hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(1)
digits = load_digits()
x = (digits.data / 16.0).astype("float32")
y = digits.target.astype("int64")
x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(1000, seed=hvd.rank()).batch(args.batch_size)

keras.utils.set_random_seed(hvd.rank())  # different init per rank: the broadcast below makes them equal
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
opt = keras.optimizers.Adam(0.001 * hvd.size())


@tf.function
def train_step(images, labels, first_batch):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    # Broadcast after the first step so the optimizer's variables exist too.
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)
    return loss


for step, (images, labels) in enumerate(dataset.take(args.steps // hvd.size())):
    loss = train_step(images, labels, step == 0)
    if step % 50 == 0 and hvd.rank() == 0:
        print("step %d loss %.4f" % (step, float(loss)), flush=True)

acc = float(np.mean(np.argmax(model(digits.data / 16.0), axis=1) == digits.target))
acc = float(hvd.allreduce(tf.constant(acc)))
weights = np.concatenate([w.ravel() for w in model.get_weights()])
same = hvd.allgather(tf.constant(weights[None, :])).numpy()
assert all(np.array_equal(same[0], w) for w in same), "weights differ across ranks"
if hvd.rank() == 0:
    print("final accuracy %.4f, weights identical on %d ranks" % (acc, hvd.size()))
