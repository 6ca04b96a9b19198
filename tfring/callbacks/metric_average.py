"""Average epoch-end metrics over ranks so every rank (and rank 0's logs) sees the global value."""
from tfring.callbacks._base import Callback
import numpy as np
import tensorflow as tf

import tfring


class MetricAverageCallback(Callback):
    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or tfring.size() == 1:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and isinstance(float(v), float))
        if not keys:
            return
        values = tf.constant([float(logs[k]) for k in keys], tf.float64)
        averaged = tfring.allreduce(values, op=tfring.Average, name="tfring_metric_average").numpy()
        for k, v in zip(keys, averaged):
            logs[k] = float(v)
