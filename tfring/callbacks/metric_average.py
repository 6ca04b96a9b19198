"""Average epoch-end metrics over the ranks (of process_set) so every rank sees the global value."""
import numpy as np

from tfring.callbacks._base import Callback
from tfring.common.process_sets import process_set_size
from tfring.common.reduce_ops import Average
from tfring.keras._backend import glue


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
        values = np.array([float(logs[k]) for k in keys], np.float64)
        averaged = glue().allreduce_numpy(values, Average, "tfring_metric_average", self.process_set)
        for k, v in zip(keys, averaged):
            logs[k] = float(v)
