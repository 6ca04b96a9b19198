"""Learning-rate schedules by epoch (optionally per batch), and the standard large-batch warmup."""
from tfring.callbacks._base import Callback, print_msg

from tfring.common import topology
from tfring.common.process_sets import process_set_size
from tfring.keras._backend import glue


class LearningRateScheduleCallback(Callback):
    """Sets the learning rate to `initial_lr * multiplier(epoch)` for `start_epoch <= epoch < end_epoch`.

    With staircase=False the epoch is fractional (epoch + batch / steps_per_epoch) and the rate is set before
    every batch.

    Args:
        initial_lr: the base learning rate.
        multiplier: a function of the epoch, or a constant.
        start_epoch: first epoch (0-based) of the schedule.
        end_epoch: the epoch it stops before (None: never).
        staircase: True: set once per epoch; False: before every batch, with a fractional epoch.
        momentum_correction: accepted for Horovod compatibility; in Keras 3 the momentum is a constant of the
            compiled step, so it is not rescaled.
        steps_per_epoch: batches per epoch, for staircase=False (default: what Keras reports).
        verbose: 1 prints each epoch's rate on rank 0 (through Keras' messaging).
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__()
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = 0

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _set(self, epoch):
        lr = self.initial_lr * self.multiplier(epoch)
        # JAX: between batches the trainer holds the state; sync it so the next step reads the new rate.
        glue().sync_model_state(self.model)
        self.model.optimizer.learning_rate = lr
        return lr

    def _steps(self):
        steps = self.steps_per_epoch or (self.params or {}).get("steps")
        if not steps:
            raise ValueError("%s: steps_per_epoch=None and Keras did not report the steps per epoch; pass "
                             "steps_per_epoch" % type(self).__name__)
        return steps

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._in_range(epoch):
            lr = self._set(epoch)
            if self.verbose and topology.rank() == 0:
                print_msg("\nEpoch %d: learning rate set to %g" % (epoch + 1, lr))

    def on_train_batch_begin(self, batch, logs=None):
        if not self.staircase and self._in_range(self.current_epoch):
            self._set(self.current_epoch + float(batch) / self._steps())


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from initial_lr / size to initial_lr over warmup_epochs, batch by batch.

    The large-batch warmup of Goyal et al.: lr(e) = initial_lr / size * (e * (size - 1) / warmup_epochs + 1),
    e the fractional epoch; size is that of process_set. After the warmup the rate is exactly initial_lr.

    Args:
        initial_lr: the rate at the end of the warmup (usually the single-rank rate times size).
        warmup_epochs: epochs of the ramp.
        momentum_correction: accepted for Horovod compatibility (not applied; see
            `LearningRateScheduleCallback`).
        steps_per_epoch: batches per epoch (default: what Keras reports).
        verbose: 1 prints a message on rank 0 when the warmup ends (through Keras' messaging).
        process_set: the `tfring.ProcessSet` whose size scales the rate (default: all ranks).
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0,
                 process_set=None):
        def multiplier(epoch):
            n = process_set_size(self.process_set)
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch, verbose=verbose)
        self.warmup_epochs = warmup_epochs
        self.process_set = process_set

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.warmup_epochs - 1:
            glue().sync_model_state(self.model)
            self.model.optimizer.learning_rate = self.initial_lr  # exactly the target after warmup
            if self.verbose and topology.rank() == 0:
                print_msg("\nEpoch %d: finished warmup, learning rate %g" % (epoch + 1, self.initial_lr))
