"""Data-parallel Keras training on scikit-learn's bundled 8x8 digits (1,797 images, shipped inside the
scikit-learn wheel: no download). The usual Horovod recipe; only the import line differs. Any Keras backend:

    tfringrun -np 2 python examples/keras_digits.py
    KERAS_BACKEND=jax tfringrun -np 2 python examples/keras_digits.py
    KERAS_BACKEND=torch tfringrun -np 2 python examples/keras_digits.py
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import tfring.keras as hvd  # was: import horovod.tensorflow.keras as hvd  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.002, help="single-rank learning rate (scaled by size)")
parser.add_argument("--checkpoint-dir", default=None)
parser.add_argument("--target-accuracy", type=float, default=None, help="exit 1 if validation accuracy is lower")
args = parser.parse_args()

hvd.init()
if keras.backend.backend() == "tensorflow":
    import tensorflow as tf
    # Pin one device per process (GPU builds); on CPU, one intra-op thread per rank avoids oversubscription.
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(1234 + hvd.rank())

digits = load_digits()
x = (digits.images / 16.0).astype("float32")[..., None]
y = digits.target.astype("int64")
x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
# Each rank trains on its own shard.
x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

model = keras.Sequential([
    keras.Input((8, 8, 1)),
    keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
    keras.layers.Conv2D(32, 3, activation="relu"),
    keras.layers.Flatten(),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(10, activation="softmax"),
])
scaled_lr = args.lr * hvd.size()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr)),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])

steps_per_epoch = int(np.ceil(len(x_train) / args.batch_size))
callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3, steps_per_epoch=steps_per_epoch),
]
if args.checkpoint_dir and hvd.rank() == 0:
    callbacks.append(hvd.callbacks.BestModelCheckpoint(os.path.join(args.checkpoint_dir, "best.keras"),
                                                       monitor="val_accuracy"))

model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, steps_per_epoch=steps_per_epoch,
          validation_data=(x_val, y_val), callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)

loss, acc = model.evaluate(x_val, y_val, verbose=0)
acc = float(hvd.allreduce(np.array(acc), name="final_accuracy"))
if hvd.rank() == 0:
    print("validation accuracy %.4f on %d ranks" % (acc, hvd.size()))
if args.target_accuracy is not None and acc < args.target_accuracy:
    raise SystemExit("validation accuracy %.4f below target %.4f" % (acc, args.target_accuracy))
