"""Autotune vs hand-picked settings on the ResNet-50 gradient set (grouped allreduce in a tf.function, np=2).
One process per setting run; with TFRING_AUTOTUNE=1 the loop first runs until the tuner settles, then measures.

    tfringrun -np 2 python benchmarks/autotune_bench.py --seconds 8 [--tuned]
Prints one JSON line on rank 0: the setting in force and the median step time.
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfring as hvd  # noqa: E402
from impl import write_json  # noqa: E402
from timing import median_ms  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=15, help="timed steps after warm-up / tuning")
parser.add_argument("--tune-timeout", type=float, default=300)
parser.add_argument("--out")
args = parser.parse_args()

hvd.init()
import keras  # noqa: E402

shapes = [tuple(v.shape) for v in keras.applications.ResNet50(weights=None).trainable_variables]
tensors = [tf.constant(np.ones(s, np.float32)) for s in shapes]
step = tf.function(lambda ts: hvd.grouped_allreduce(ts, op=hvd.Average))
tuning = os.environ.get("TFRING_AUTOTUNE") == "1"
log = os.environ.get("TFRING_AUTOTUNE_LOG", "")
start = time.time()
tune_steps = 0
while tuning:
    step(tensors)
    tune_steps += 1
    mine = 1 if hvd.rank() == 0 and os.path.exists(log) and "\nbest," in open(log).read() else 0
    mine = mine or int(time.time() - start > args.tune_timeout)
    if int(hvd.broadcast(tf.constant(mine), 0, name="settled")):
        break
ms = median_ms(lambda: step(tensors), args.steps)
fusion, cycle = hvd.tunables()
if hvd.rank() == 0:
    result = {"autotune": tuning, "fusion_threshold_bytes": fusion, "cycle_time_ms": cycle, "step_ms": ms,
              "tuning_steps": tune_steps, "tuning_seconds": time.time() - start}
    print(json.dumps(result))
    if args.out:
        write_json(args.out, result)
