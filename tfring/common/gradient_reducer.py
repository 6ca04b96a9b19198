"""The one gradient reducer behind TensorFlow's DistributedGradientTape and the Keras DistributedOptimizer on
every backend, framework-free: Horovod's options (op, compression, gradient_predivide_factor, groups, process set,
worker-local variables) decided once here; a binding's subclass says only how a group of its tensors is reduced
and how a local gradient is scaled."""
from tfring.common import gradient_groups
from tfring.common.process_sets import process_set_size
from tfring.common.reduce_ops import Average


def local_layer_variables(who, local_layers, layer_types):
    """The trainable variables of local_layers (Horovod's `local_layers` argument).

    Args:
        who: the caller's name, for messages.
        local_layers: a built Keras layer, a list of them, or None.
        layer_types: the layer base classes of the Keras in use (Keras 3, and tf_keras' where loaded).

    Returns:
        list: their trainable variables.

    Raises:
        ValueError: something is not a Keras layer, or a layer is not built.
    """
    if local_layers is None:
        return []
    layers = [local_layers] if isinstance(local_layers, layer_types) else list(local_layers)
    for layer in layers:
        if not isinstance(layer, layer_types):
            raise ValueError("%s: local_layers must be Keras layers; got %r" % (who, layer))
        if not layer.built:
            raise ValueError("%s: local layer %r is not built yet, so it has no variables to keep local; build "
                             "the model first" % (who, layer.name))
    return [v for layer in layers for v in layer.trainable_weights]


class GradientReducer:
    """Reduces gradients over the ranks of process_set, except those of registered local variables, which stay
    local (divided by the set's size when scale_local_gradients, as Horovod's pull 3695: a local variable then
    moves at the same scale as the averaged global ones). On a rank outside the set, or in a set of one rank,
    the gradients come back unchanged (as Horovod).

    Subclasses give `var_key` and `is_variable` (static), `_reduce_present` and `_scaled`.

    Args:
        who: the owner's name, for messages.
        op, compression, sparse_as_dense, gradient_predivide_factor: as for `DistributedOptimizer`.
        groups, num_groups, process_set, device_dense, device_sparse, scale_local_gradients: the same.

    Raises:
        ValueError: gradient_predivide_factor with an op other than Average, or malformed groups.
    """

    def __init__(self, who, op=Average, compression=None, sparse_as_dense=False, gradient_predivide_factor=1.0,
                 groups=None, num_groups=0, process_set=None, device_dense="", device_sparse="",
                 scale_local_gradients=True):
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("%s: gradient_predivide_factor=%r needs op=Average" % (who, gradient_predivide_factor))
        self.who = who
        self.op, self.compression, self.sparse_as_dense = op, compression, sparse_as_dense
        self.predivide = gradient_predivide_factor
        self.groups = gradient_groups.check_groups(who, groups, num_groups, self.is_variable, self.var_key)
        self.process_set = process_set
        self.devices = (device_dense, device_sparse)
        self.scale_local_gradients = scale_local_gradients
        self.local = {}  # var_key -> variable (kept alive so an id() key stays valid)

    @staticmethod
    def var_key(var):
        """A variable's hashable identity."""
        return id(var)

    @staticmethod
    def is_variable(value):
        """Whether value is a variable of this framework (for `groups`)."""
        raise NotImplementedError

    def register_local(self, var):
        """Keeps var's gradient local.

        Args:
            var: a variable.
        """
        self.local[self.var_key(var)] = var

    def is_local(self, var):
        """Whether var was registered as local.

        Args:
            var: a variable.

        Returns:
            bool
        """
        return self.var_key(var) in self.local

    def split(self, present, keys):
        """The index lists of the grouped allreduces that reduce the gradients at `present`."""
        return gradient_groups.split_groups(self.who, self.groups, present, keys, self.var_key)

    def reduce(self, grads, variables=None):
        """Reduces the gradients.

        Args:
            grads: a flat list of gradients (None stays None).
            variables: the matching variables, or None (then none is local, and list groups cannot apply).

        Returns:
            list: the reduced gradients, in order.

        Raises:
            ValueError: groups given as variable lists but no variables.
        """
        grads = list(grads)
        if not gradient_groups.communicates(self.process_set):
            return grads
        keys = [self.var_key(v) for v in variables] if variables is not None else None
        local = [i for i in range(len(grads)) if keys is not None and keys[i] in self.local]
        present = [i for i, g in enumerate(grads) if g is not None and i not in local]
        pre, post = (1.0 / self.predivide, self.predivide) if self.op == Average else (1.0, 1.0)
        kwargs = dict(op=self.op, compression=self.compression, prescale_factor=pre, postscale_factor=post,
                      process_set=self.process_set)
        out = list(grads)
        for i, r in self._reduce_present(grads, present, keys, variables, kwargs).items():
            out[i] = r
        if self.scale_local_gradients:
            n = process_set_size(self.process_set)
            for i in local:
                if grads[i] is not None:
                    out[i] = self._scaled(grads[i], n)
        return out

    def _reduce_present(self, grads, present, keys, variables, kwargs):
        """{index: reduced gradient} for the gradients at `present` (kwargs: op, compression, scale factors,
        process_set)."""
        raise NotImplementedError

    def _scaled(self, grad, n):
        """A local gradient divided by n."""
        return grad / n
