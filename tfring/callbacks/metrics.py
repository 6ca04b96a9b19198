"""Puts tfring's monitor numbers (waiting, transfer, bus bandwidth, straggler) in the Keras logs."""
import time

from tfring.callbacks._base import Callback
from tfring.common import monitor


class MetricsCallback(Callback):
    """Adds the job's communication metrics to every epoch's logs (so History, CSVLogger and TensorBoard get
    them) and marks each batch as a step for the straggler detector.

    Log keys (numbers, the same on every rank): `tfring_step_ms` (this rank's mean batch time over the epoch),
    `tfring_wait_ms` (the mean over ranks of the time a step waited for other ranks, last round),
    `tfring_max_wait_ms` (the longest such wait), `tfring_busbw_gbps` (the highest rank's bus bandwidth in
    the last round), `tfring_straggler` (the straggler's rank, -1 for none) and `tfring_straggler_ms` (how long
    the others waited for it per step). Put it before TensorBoard / CSVLogger.

    Args:
        per_batch: also add the numbers to each batch's logs (off: the per-batch logs stay as they are).
    """
    def __init__(self, per_batch=False):
        super().__init__()
        self.per_batch = per_batch
        self._start = None
        self._batches = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._start, self._batches = time.perf_counter(), 0

    def on_train_batch_end(self, batch, logs=None):
        monitor.mark_step()
        self._batches += 1
        if self.per_batch and logs is not None:
            logs.update(self._values())

    def _values(self):
        m = monitor.metrics()
        out = {}
        if self._start is not None and self._batches:
            out["tfring_step_ms"] = 1000.0 * (time.perf_counter() - self._start) / self._batches
        if not m:
            return out
        waits = [r["wait_ms_per_step"] for r in m["ranks"]]
        out["tfring_wait_ms"] = sum(waits) / len(waits)
        out["tfring_max_wait_ms"] = max(waits)
        out["tfring_busbw_gbps"] = max(r["busbw_gbps"] for r in m["ranks"])
        s = m.get("straggler")
        out["tfring_straggler"] = float(s["rank"]) if s else -1.0
        out["tfring_straggler_ms"] = float(s["waited_ms_per_step"]) if s else 0.0
        return out

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs.update(self._values())
