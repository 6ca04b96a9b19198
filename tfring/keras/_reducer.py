"""The gradient reducer of the Keras DistributedOptimizer on the JAX and torch backends: Horovod's options
(op, compression, gradient_predivide_factor, groups, process set, worker-local variables) over the backend's
grouped allreduce. Inside the JAX trainer's jitted step the collectives are compiled into the step."""
import keras

from tfring.common import gradient_groups
from tfring.common.monitor import label_group, variable_label
from tfring.common.process_sets import process_set_size
from tfring.common.reduce_ops import Average


def grouped_names(name, n):
    """The names the core negotiates for a grouped collective named `name` of n tensors (tfring.jax's and
    tfring.torch's rule, before the torch binding's prefix)."""
    return [name] if n == 1 else ["%s_%dof%d" % (name, j + 1, n) for j in range(n)]


def var_key(var):
    """A variable's identity (Keras 3 variables of the JAX and torch backends are plain objects)."""
    return id(var)


class GradientReducer:
    """Reduces gradients over the ranks of process_set, except those of registered local variables, which stay
    local (divided by the set's size when scale_local_gradients, as Horovod).

    Args:
        who: the owner's name, for messages.
        grouped_allreduce: the backend binding's grouped_allreduce.
        op, compression, sparse_as_dense, gradient_predivide_factor: as for the Keras `DistributedOptimizer`.
        groups, num_groups, process_set, device_dense, device_sparse, scale_local_gradients: the same.

    Raises:
        ValueError: gradient_predivide_factor with an op other than Average, or malformed groups.
    """

    def __init__(self, who, grouped_allreduce, op=Average, compression=None, sparse_as_dense=False,
                 gradient_predivide_factor=1.0, groups=None, num_groups=0, process_set=None, device_dense="",
                 device_sparse="", scale_local_gradients=True, core_names=grouped_names):
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("%s: gradient_predivide_factor=%r needs op=Average" % (who, gradient_predivide_factor))
        self.who = who
        self._grouped_allreduce = grouped_allreduce
        self._core_names = core_names  # the binding's naming rule: stall reports label the gradients by them
        self.op, self.compression = op, compression
        self.predivide = gradient_predivide_factor
        self.groups = gradient_groups.check_groups(who, groups, num_groups,
                                                   lambda v: isinstance(v, keras.Variable), var_key)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.local = {}  # var_key -> variable (kept alive so an id() key stays valid)

    def register_local(self, var):
        """Keeps var's gradient local.

        Args:
            var: a Keras variable.
        """
        self.local[var_key(var)] = var

    def reduce(self, grads, variables=None):
        """Reduces the gradients; on a rank outside the process set or in a set of one rank they come back as
        they are.

        Args:
            grads: a flat list of gradients (None stays None).
            variables: the matching variables, or None (then none is local, and list groups cannot apply).

        Returns:
            list: the reduced gradients, in order.
        """
        grads = list(grads)
        if not gradient_groups.communicates(self.process_set):
            return grads
        keys = [var_key(v) for v in variables] if variables is not None else None
        local = set(i for i in range(len(grads)) if keys is not None and keys[i] in self.local)
        present = [i for i, g in enumerate(grads) if g is not None and i not in local]
        pre, post = (1.0 / self.predivide, self.predivide) if self.op == Average else (1.0, 1.0)
        out = list(grads)
        for idx in gradient_groups.split_groups(self.who, self.groups, present, keys, var_key):
            name = None
            if variables is not None:
                # Named after the group's first variable (identical on every rank, unique within the process:
                # Keras makes layer names unique), so stall reports can say which variable each gradient is.
                name = "grads.%s.n%d" % (variables[idx[0]].path, len(idx))
                label_group(self._core_names(name, len(idx)), [variable_label(variables[i]) for i in idx])
            reduced = self._grouped_allreduce([grads[i] for i in idx], op=self.op, compression=self.compression,
                                              prescale_factor=pre, postscale_factor=post,
                                              process_set=self.process_set, name=name)
            for i, r in zip(idx, reduced):
                out[i] = r
        if self.scale_local_gradients:  # as Horovod (its pull 3695): local variables move at the global scale
            n = process_set_size(self.process_set)
            for i in local:
                if grads[i] is not None:
                    out[i] = grads[i] / n
        return out
