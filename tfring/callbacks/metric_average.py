"""Average epoch-end metrics over the ranks (of process_set) so every rank sees the global value."""
from tfring.callbacks._base import Callback
import numpy as np
import tensorflow as tf

from tfring import tensorflow as tfr
from tfring.common.process_sets import process_set_size


class MetricAverageCallback(Callback):
    """Averages the scalar metrics of the epoch's logs over the ranks, so every rank sees the global values.

    Runs at every epoch end (one allreduce). Put it before callbacks that read metrics (ReduceLROnPlateau,
    checkpoints, TensorBoard, early stopping), so they see the averages.

    Args:
        device: accepted for Horovod compatibility (ignored).
        process_set: the `tfring.ProcessSet` to average over (default: all ranks).
    """
    def __init__(self, device="", process_set=None):
        super().__init__()
        self.process_set = process_set

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or process_set_size(self.process_set) == 1:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and isinstance(float(v), float))
        if not keys:
            return
        values = tf.constant([float(logs[k]) for k in keys], tf.float64)
        averaged = tfr.allreduce(values, op=tfr.Average, name="tfring_metric_average",
                                    process_set=self.process_set).numpy()
        for k, v in zip(keys, averaged):
            logs[k] = float(v)
