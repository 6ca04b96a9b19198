"""Synthetic ResNet-50 benchmark, like Horovod's tensorflow2_synthetic_benchmark.py: keras.applications
ResNet50 (weights=None) on random images; prints img/sec per rank and in total.

    tfringrun -np 2 python examples/keras_synthetic_benchmark.py --batch-size 8 --num-iters 3
"""
import argparse
import os
import timeit

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfring as hvd  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="ResNet50")
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--image-size", type=int, default=224)
parser.add_argument("--num-warmup-batches", type=int, default=2)
parser.add_argument("--num-batches-per-iter", type=int, default=5)
parser.add_argument("--num-iters", type=int, default=5)
parser.add_argument("--fp16-allreduce", action="store_true")
args = parser.parse_args()

hvd.init()
gpus = tf.config.list_physical_devices("GPU")
if gpus:
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

model = getattr(keras.applications, args.model)(weights=None, input_shape=(args.image_size, args.image_size, 3))
opt = keras.optimizers.SGD(0.01)
loss_fn = keras.losses.SparseCategoricalCrossentropy()
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
rng = np.random.RandomState(hvd.rank())
data = tf.constant(rng.rand(args.batch_size, args.image_size, args.image_size, 3).astype("float32"))
target = tf.constant(rng.randint(0, 1000, size=(args.batch_size,)))


@tf.function
def step(first):
    with tf.GradientTape() as tape:
        loss = loss_fn(target, model(data, training=True))
    tape = hvd.DistributedGradientTape(tape, compression=compression)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first:  # start every rank from rank 0's weights once the optimizer exists
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)


def log(msg):
    if hvd.rank() == 0:
        print(msg, flush=True)


log("Model: %s, batch size %d per rank, %d ranks" % (args.model, args.batch_size, hvd.size()))
step(True)
timeit.timeit(lambda: step(False), number=args.num_warmup_batches)
rates = []
for i in range(args.num_iters):
    t = timeit.timeit(lambda: step(False), number=args.num_batches_per_iter)
    rate = args.batch_size * args.num_batches_per_iter / t
    log("Iter #%d: %.1f img/sec per rank" % (i, rate))
    rates.append(rate)
mean, conf = np.mean(rates), 1.96 * np.std(rates)
log("Img/sec per rank: %.1f +-%.1f" % (mean, conf))
log("Total img/sec on %d rank(s): %.1f +-%.1f" % (hvd.size(), hvd.size() * mean, hvd.size() * conf))
