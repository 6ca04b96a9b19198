"""Start every rank from root_rank's weights and optimizer state."""
from tfring.callbacks._base import Callback, optimizer_built

import tfring


class BroadcastGlobalVariablesCallback(Callback):
    def __init__(self, root_rank=0, device=""):
        super().__init__()
        self.root_rank = root_rank
        self._model_done = False
        self._optimizer_done = False

    def _broadcast(self):
        opt = getattr(self.model, "optimizer", None)
        variables = []
        if not self._model_done:
            variables += list(self.model.variables)
            self._model_done = True
        if opt is not None and optimizer_built(opt) and not self._optimizer_done:
            variables += list(opt.variables)
            self._optimizer_done = True
        if variables:
            tfring.broadcast_variables(variables, self.root_rank)

    def on_train_begin(self, logs=None):
        # Keras 3 builds the optimizer before on_train_begin, so one broadcast covers everything.
        self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        # An optimizer built lazily during the first step gets its state broadcast right after it.
        if not self._optimizer_done:
            self._broadcast()
