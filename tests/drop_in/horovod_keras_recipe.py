"""A script in the usual horovod.tensorflow.keras recipe (the shape of Horovod's tensorflow2_keras_mnist
example), unchanged except the import line. Data: scikit-learn's bundled digits, padded to 28x28."""
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import tfring.keras as hvd  # was: import horovod.tensorflow.keras as hvd

# Horovod: initialize Horovod.
hvd.init()

# Horovod: pin GPU to be used to process local rank (one GPU per process)
gpus = tf.config.experimental.list_physical_devices('GPU')
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

digits = load_digits()
images = np.pad(digits.images / 16.0, ((0, 0), (10, 10), (10, 10))).astype('float32')
dataset = tf.data.Dataset.from_tensor_slices(
    (tf.cast(images[..., tf.newaxis], tf.float32), tf.cast(digits.target, tf.int64)))
dataset = dataset.repeat().shuffle(1000).batch(32)

mnist_model = tf.keras.Sequential([
    tf.keras.layers.Conv2D(16, [3, 3], activation='relu'),
    tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(64, activation='relu'),
    tf.keras.layers.Dense(10, activation='softmax')
])

# Horovod: adjust learning rate based on number of GPUs.
scaled_lr = 0.001 * hvd.size()
opt = tf.optimizers.Adam(scaled_lr)

# Horovod: add Horovod DistributedOptimizer.
opt = hvd.DistributedOptimizer(opt)

mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt, metrics=['accuracy'])

callbacks = [
    # Horovod: broadcast initial variable states from rank 0 to all other processes.
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    # Horovod: average metrics among workers at the end of every epoch.
    hvd.callbacks.MetricAverageCallback(),
    # Horovod: using `lr = 1.0 * hvd.size()` from the very beginning leads to worse final accuracy.
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2, verbose=1),
]

# Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
ckpt_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
if hvd.rank() == 0:
    callbacks.append(tf.keras.callbacks.ModelCheckpoint(os.path.join(ckpt_dir, 'checkpoint-{epoch}.keras')))

# Horovod: write logs on worker 0.
verbose = 1 if hvd.rank() == 0 else 0

# Train the model. Horovod: adjust number of steps based on number of GPUs.
mnist_model.fit(dataset, steps_per_epoch=60 // hvd.size(), callbacks=callbacks, epochs=3, verbose=verbose)

if hvd.rank() == 0:
    print("DROP_IN_OK", sorted(os.listdir(ckpt_dir)))
