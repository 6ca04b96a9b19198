"""The gradient reducer of the Keras DistributedOptimizer on the JAX and torch backends: the common reducer over
the binding's grouped allreduce (inside the JAX trainer's jitted step the collectives compile into the step).
TensorFlow's is the tape's (tfring.tensorflow.tape.GradientReducer)."""
import keras

from tfring.common import gradient_reducer
from tfring.common.monitor import label_group, variable_label
from tfring.common.names import tensor_names


class GradientReducer(gradient_reducer.GradientReducer):
    """`tfring.common.gradient_reducer.GradientReducer` over a binding's grouped allreduce.

    Args:
        who: the owner's name, for messages.
        grouped_allreduce: the backend binding's grouped_allreduce.
        core_names: the binding's naming rule for a grouped collective (stall reports label gradients by it).
        **kwargs: the common reducer's arguments.
    """

    is_variable = staticmethod(lambda value: isinstance(value, keras.Variable))

    def __init__(self, who, grouped_allreduce, core_names=tensor_names, **kwargs):
        super().__init__(who, **kwargs)
        self._grouped_allreduce = grouped_allreduce
        self._core_names = core_names

    def _reduce_present(self, grads, present, keys, variables, kwargs):
        out = {}
        for idx in self.split(present, keys):
            name = None
            if variables is not None:
                # Named after the group's first variable (identical on every rank, unique within the process:
                # Keras makes layer names unique), so stall reports can say which variable each gradient is.
                name = "grads.%s.n%d" % (variables[idx[0]].path, len(idx))
                label_group(self._core_names(name, len(idx)), [variable_label(variables[i]) for i in idx])
            out.update(zip(idx, self._grouped_allreduce([grads[i] for i in idx], name=name, **kwargs)))
        return out
