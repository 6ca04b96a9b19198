"""Start every rank (of process_set) from root_rank's weights and optimizer state."""
from tfring.callbacks._base import Callback, optimizer_built
from tfring.keras._backend import glue


class BroadcastGlobalVariablesCallback(Callback):
    """Starts every rank from `root_rank`'s weights and optimizer state (Horovod's callback).

    The model's variables are broadcast when training begins; the optimizer's as soon as it is built (Keras 3
    builds it before training; a tf_keras optimizer in its first step, so right after that step). A model that
    has no weights when training begins (a tf_keras `Sequential` without an input shape is built by its first
    batch) is broadcast right after that batch, with the optimizer, as Horovod does. Put it first in the callback
    list.

    Args:
        root_rank: the global rank whose values everyone takes.
        device: accepted for Horovod compatibility (ignored).
        local_variables: a variable or a list of variables each rank keeps as it is.
        process_set: the `tfring.ProcessSet` to broadcast within (default: all ranks).

    Raises:
        ValueError: `local_variables` holds something that is not a variable.
    """

    def __init__(self, root_rank=0, device="", local_variables=None, process_set=None):
        super().__init__()
        self.root_rank = root_rank
        self.process_set = process_set
        self._model_done = False
        self._optimizer_done = False
        self._local = {}  # var_key -> variable (kept alive so an id() key stays valid)
        if local_variables is not None:
            if hasattr(local_variables, "assign"):
                local_variables = [local_variables]
            for v in local_variables:
                if not hasattr(v, "assign"):
                    raise ValueError("BroadcastGlobalVariablesCallback: local_variables must be variables; got %r"
                                     % (v,))
                self.register_local_var(v)

    def register_local_var(self, var):
        """Leaves var out of the broadcast: each rank keeps its own value.

        Args:
            var: a variable of the model or optimizer.
        """
        self._local[glue().var_key(var)] = var

    def _model_variables(self):
        """The model's variables; None while a model that its first batch builds has none yet."""
        try:
            variables = list(self.model.variables)
        except ValueError:  # tf_keras: "Weights for model 'sequential' have not yet been created"
            return None
        return variables if variables or getattr(self.model, "built", True) else None

    def _broadcast(self):
        backend = glue()
        backend.sync_model_state(self.model)  # JAX: the trainer's state back in the variables
        opt = getattr(self.model, "optimizer", None)
        variables = []
        if not self._model_done:
            model_variables = self._model_variables()
            if model_variables is not None:
                variables += model_variables
                self._model_done = True
        if opt is not None and optimizer_built(opt) and not self._optimizer_done:
            if variables == []:
                # The optimizer's state arrives after a step: that step ran with each rank's own state, so the
                # weights are sent again with it (as Horovod, which sends everything after the first batch).
                variables += list(self.model.variables)
            variables += list(opt.variables)
            self._optimizer_done = True
        variables = [v for v in variables if backend.var_key(v) not in self._local]
        if variables:
            backend.broadcast_variables(variables, self.root_rank, self.process_set)

    def on_train_begin(self, logs=None):
        # Before the first step: on TensorFlow, a step XLA-compiled for a GPU the lowering does not serve falls back
        # to jit_compile=False (jit_compile="auto" must not fail because of tfring). Keras 3 builds the optimizer
        # before on_train_begin, so one broadcast covers everything.
        glue().before_fit(self.model)
        self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        # A model or optimizer built lazily during the first step gets broadcast right after it.
        if not (self._optimizer_done and self._model_done):
            self._broadcast()
