"""Keras callbacks of elastic training (Horovod's): commit every N batches, and keep `state.batch` /
`state.epoch` current so a reset resumes where the last commit was."""
from tfring.callbacks._base import Callback


class CommitStateCallback(Callback):
    """Commits `state` every `batches_per_commit` batches and at each epoch end.

    Args:
        state: the `tfring.tensorflow.elastic.State`.
        batches_per_commit: batches between commits (a commit copies the model; fewer commits, more lost work).

    Raises:
        ValueError: batches_per_commit < 1.
    """

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if int(batches_per_commit) < 1:
            raise ValueError("tfring.keras.elastic.CommitStateCallback: batches_per_commit=%r must be >= 1"
                             % (batches_per_commit,))
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit  # the same on every rank after a reset

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(Callback):
    """Keeps `state.batch` at the last finished batch of the epoch (0 after an epoch). Like Horovod's, it also
    lowers `params["steps"]` of the resumed epoch, which only progress bars read: `fit` reruns the epoch in full.

    Args:
        state: a `tfring.tensorflow.elastic.State` with a `batch` attribute.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        params = getattr(self, "params", None) or {}
        if params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = params["steps"]
            params["steps"] = self.steps_per_epoch - self.state.batch

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(Callback):
    """Keeps `state.epoch` at the number of finished epochs across resets (Keras counts each `fit` from 0: pass
    `epochs=total - state.epoch`, as with Horovod).

    Args:
        state: a `tfring.tensorflow.elastic.State` with an `epoch` attribute.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1
