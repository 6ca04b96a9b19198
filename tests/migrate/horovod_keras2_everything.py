"""A Horovod script of the Keras 2 / TF1 era, written for tests/migrate: one of every construct tfring.migrate
knows, each line marked `# expect: RULE` with what it must report there (never run; tests only read it)."""
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import backend as K
from keras.layers.core import Dense  # expect: keras-moved
from keras.utils.np_utils import to_categorical  # expect: keras-moved
from keras.preprocessing.image import ImageDataGenerator  # expect: keras-removed
from tensorflow.keras.optimizers.legacy import RMSprop  # expect: optimizer-legacy
import horovod  # expect: horovod-import
import horovod.tensorflow.keras as hvd  # expect: horovod-import
from horovod.tensorflow.keras import callbacks as hvd_callbacks  # expect: horovod-import
import horovod.tensorflow as hvd_tf  # expect: horovod-import

hvd.init()

# Horovod: pin GPU to be used to process local rank (one GPU per process)
config = tf.ConfigProto()  # expect: tf1-api
config.gpu_options.visible_device_list = str(hvd.local_rank())
K.set_session(tf.Session(config=config))  # expect: backend-gone, tf1-api


class LearningRateLogger(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        lr = K.get_value(self.model.optimizer.lr)  # expect: backend-value, optimizer-lr
        K.set_value(self.model.optimizer.lr, lr * 0.9)  # expect: backend-value, optimizer-lr
        print(K.learning_phase())  # expect: backend-gone


def batches():
    while True:
        x = np.random.rand(32, 8).astype("float32")
        yield x, to_categorical((x.sum(axis=1) > 4).astype("int64"), 2)


def train():
    model = keras.Sequential([Dense(16, activation="relu", input_shape=(8,)),
                              keras.layers.experimental.preprocessing.Rescaling(1.0),  # expect: keras-moved
                              Dense(2, activation="softmax")])
    opt = tf.keras.optimizers.legacy.SGD(lr=0.01 * hvd.size(), momentum=0.9,  # expect: optimizer-legacy, optimizer-lr
                                         decay=1e-6)  # expect: optimizer-decay
    opt = hvd.DistributedOptimizer(opt, backward_passes_per_step=1)
    model.compile(loss="categorical_crossentropy",
                  optimizer=opt,
                  metrics=["accuracy"],
                  experimental_run_tf_function=False)  # expect: compile-args
    callbacks = [hvd_callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(),
                 LearningRateLogger()]
    if hvd.rank() == 0:
        callbacks.append(keras.callbacks.ModelCheckpoint("./checkpoint-{epoch}"))  # expect: save-format
    model.fit_generator(batches(), 8, 1,  # expect: fit-generator
                        callbacks=callbacks, workers=2, use_multiprocessing=True)
    model.evaluate(batches(), steps=2, max_queue_size=4)  # expect: fit-loader-args
    hvd_tf.broadcast_variables(opt.variables(), root_rank=0)  # expect: variables-call
    print("lr", opt.lr)  # expect: optimizer-lr
    print(model.predict_classes(np.zeros((1, 8))))  # expect: keras-removed
    augment = ImageDataGenerator(rotation_range=8)
    extra = RMSprop(lr=0.001)  # expect: optimizer-lr
    hook = hvd_tf.BroadcastGlobalVariablesHook(0)  # expect: horovod-missing
    if hvd.rank() == 0:
        model.save_weights("weights.h5")  # expect: save-format
    return augment, extra, hook


if __name__ == "__main__":
    if len(sys.argv) > 2:
        horovod.run(train, np=2, use_gloo=sys.argv[2] == "gloo")  # expect: horovod-import, horovod-run-args
    else:
        train()
