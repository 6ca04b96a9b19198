"""Elastic Keras training on scikit-learn's digits: the job goes on when a worker dies (rolling back to the last
commit) and grows when the discovery script reports more slots. Horovod's elastic Keras recipe; only the
import line differs.

    tfringrun -np 3 --min-np 2 --max-np 4 --host-discovery-script ./discover_hosts.sh \\
        python examples/keras_elastic.py
    # without a discovery script it still survives a lost worker:  tfringrun -np 3 --min-np 2 python ...
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import tfring.keras as hvd  # was: import horovod.tensorflow.keras as hvd  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=12)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.002, help="single-rank learning rate (scaled by size)")
parser.add_argument("--batches-per-commit", type=int, default=5, help="fewer: less work lost, more copying")
parser.add_argument("--target-accuracy", type=float, default=None, help="exit 1 if validation accuracy is lower")
args = parser.parse_args()

hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(1234)

digits = load_digits()
x = (digits.images / 16.0).astype("float32")[..., None]
y = digits.target.astype("int64")
x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)

model = keras.Sequential([
    keras.Input((8, 8, 1)),
    keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
    keras.layers.Flatten(),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(10, activation="softmax"),
])
optimizer = hvd.DistributedOptimizer(keras.optimizers.Adam(args.lr * hvd.size()))
model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])

state = hvd.elastic.KerasState(model, optimizer, epoch=0, batch=0)


def rescale_learning_rate():
    # Called after every reset: size() is the new number of ranks.
    optimizer.learning_rate.assign(args.lr * hvd.size())


state.register_reset_callbacks([rescale_learning_rate])


@hvd.elastic.run
def train(state):
    # Shard by the current rank and size: both change when workers leave or join.
    xs, ys = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
    model.fit(xs, ys, batch_size=args.batch_size, epochs=args.epochs - state.epoch,
              steps_per_epoch=int(np.ceil(len(xs) / args.batch_size)), verbose=2 if hvd.rank() == 0 else 0,
              callbacks=[hvd.elastic.UpdateEpochStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
                         hvd.elastic.CommitStateCallback(state, batches_per_commit=args.batches_per_commit)])


train(state)
_, acc = model.evaluate(x_val, y_val, verbose=0)
acc = float(hvd.allreduce(np.array(acc), name="final_accuracy"))
if hvd.rank() == 0:
    print("validation accuracy %.4f on %d ranks after %d epochs" % (acc, hvd.size(), state.epoch))
if args.target_accuracy is not None and acc < args.target_accuracy:
    raise SystemExit("validation accuracy %.4f below target %.4f" % (acc, args.target_accuracy))
