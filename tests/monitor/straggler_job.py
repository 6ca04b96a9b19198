"""A small data-parallel TF training loop where one rank can be slowed by a sleep per step; each rank prints
RESULT <json>: the step at which tfring.metrics() first named a straggler (and whom), and the last summary."""
import argparse
import json
import time

import numpy as np
import tensorflow as tf

import tfring.tensorflow as hvd

p = argparse.ArgumentParser()
p.add_argument("--slow-rank", type=int, default=-1)
p.add_argument("--sleep", type=float, default=0.05)
p.add_argument("--steps", type=int, default=40)
p.add_argument("--mark", action="store_true", help="call tfring.mark_step() after each step")
args = p.parse_args()

hvd.init()
tf.random.set_seed(1)
model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"),
                             tf.keras.layers.Dense(10)])
opt = tf.keras.optimizers.SGD(0.01)
x = np.random.RandomState(hvd.rank()).rand(64, 32).astype(np.float32)
y = np.random.RandomState(hvd.rank()).randint(0, 10, 64)


@tf.function
def step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss


named_at, named = None, None
start = time.perf_counter()
for i in range(args.steps):
    if hvd.rank() == args.slow_rank:
        time.sleep(args.sleep)
    step()
    if args.mark:
        hvd.mark_step()
    s = hvd.straggler()
    if s is not None and named_at is None:
        named_at, named = i + 1, s
elapsed = time.perf_counter() - start
print("RESULT " + json.dumps({"rank": hvd.rank(), "named_at": named_at, "named": named, "seconds": elapsed,
                              "metrics": hvd.metrics()}), flush=True)
