"""A Keras-2-era Horovod training script (TF <= 2.15, Horovod 0.28 style), written for tests/migrate: it fails on
Keras 3 as written and trains on tfring after `python -m tfring.migrate --write`."""
import numpy as np
from tensorflow import keras
from tensorflow.keras import backend as K
import horovod.tensorflow.keras as hvd

# Horovod: initialize Horovod.
hvd.init()


class HalveLearningRate(keras.callbacks.Callback):
    """Keras 2 idiom: read and write the learning rate through the backend."""

    def on_epoch_end(self, epoch, logs=None):
        old = K.get_value(self.model.optimizer.lr)
        K.set_value(self.model.optimizer.lr, old * 0.5)


rng = np.random.RandomState(1234 + hvd.rank())  # every rank its own shard of the data
x = rng.rand(512, 8).astype("float32")
y = (x.sum(axis=1) > 4.0).astype("int64")


def batches(batch_size=32):
    while True:
        idx = rng.randint(0, len(x), batch_size)
        yield x[idx], y[idx]


model = keras.Sequential([
    keras.layers.Dense(16, activation="relu", input_shape=(8,)),
    keras.layers.Dense(2, activation="softmax"),
])

# Horovod: scale the learning rate by the number of workers; wrap the optimizer.
opt = keras.optimizers.legacy.Adam(lr=0.01 * hvd.size())
opt = hvd.DistributedOptimizer(opt)

model.compile(loss="sparse_categorical_crossentropy",
              optimizer=opt,
              metrics=["accuracy"],
              experimental_run_tf_function=False)

callbacks = [
    # Horovod: broadcast initial variable states from rank 0 to all other processes.
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    HalveLearningRate(),
]

model.fit_generator(batches(), steps_per_epoch=16, epochs=1, verbose=0, callbacks=callbacks,
                    workers=1, use_multiprocessing=False)

# Horovod: optimizer state is broadcast like the model's (Keras 2: a method).
hvd.broadcast_variables(opt.variables(), root_rank=0)
lr = float(K.get_value(model.optimizer.lr))
checksum = float(sum(np.abs(w).sum() for w in model.get_weights()))
print("MIGRATED_JOB rank=%d size=%d lr=%.6f checksum=%.6f" % (hvd.rank(), hvd.size(), lr, checksum))
