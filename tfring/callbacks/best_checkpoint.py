"""Keep the best model so far, written by rank 0 only and atomically (temp file + rename), so a kill during
a save leaves the previous checkpoint loadable."""
import os

import numpy as np

from tfring.callbacks._base import Callback, print_msg
from tfring.common import topology


class BestModelCheckpoint(Callback):
    """Saves the model whenever the monitored metric improves: rank 0 writes, atomically (temp file + rename).

    Every rank tracks the best value (pair it with `MetricAverageCallback` so they agree). Keras 3 picks the
    format from the file name: `.keras` for a model, `.weights.h5` with `save_weights_only=True`.

    Args:
        filepath: where to save; may hold `{epoch}` and the names of logged metrics (`{val_loss:.3f}`).
        monitor: the metric in the epoch's logs to watch.
        verbose: 1 prints a message (through Keras' messaging) for every save.
        mode: "min", "max", or "auto" ("max" for accuracies and f-measures, else "min").
        save_weights_only: save only the weights (`model.save_weights`).

    Raises:
        ValueError: `mode` is not "auto", "min" or "max".
    """
    def __init__(self, filepath, monitor="val_loss", verbose=0, mode="auto", save_weights_only=False):
        super().__init__()
        if mode not in ("auto", "min", "max"):
            raise ValueError("BestModelCheckpoint: mode=%r must be 'auto', 'min' or 'max'" % (mode,))
        self.filepath = filepath
        self.monitor = monitor
        self.verbose = verbose
        self.save_weights_only = save_weights_only
        if mode == "auto":
            mode = "max" if "acc" in monitor or monitor.startswith("fmeasure") else "min"
        self.better = np.less if mode == "min" else np.greater
        self.best = np.inf if mode == "min" else -np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = (logs or {}).get(self.monitor)
        if current is None or not self.better(current, self.best):
            return
        self.best = current
        if topology.rank() != 0:
            return
        path = self.filepath.format(epoch=epoch + 1, **(logs or {}))
        directory, name = os.path.split(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, ".tmp-%d-%s" % (os.getpid(), name))  # same suffix: Keras picks the format
        if self.save_weights_only:
            self.model.save_weights(tmp)
        else:
            self.model.save(tmp)
        os.replace(tmp, path)
        if self.verbose:
            print_msg("\nEpoch %d: %s improved to %.5f, saved %s" % (epoch + 1, self.monitor, current, path))
