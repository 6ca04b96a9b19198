"""DistributedGradientTape / PartialDistributedGradientTape, and GradientReducer: what they and both Keras
DistributedOptimizers do to a list of gradients (grouping, worker-local variables, process sets)."""
import sys

import tensorflow as tf

from tfring.tensorflow.compression import Compression
from tfring.common import gradient_groups
from tfring.common.gradient_groups import communicates
from tfring.common.overlap import overlap_gradients
from tfring.common.process_sets import process_set_size
from tfring.tensorflow.ops import Average, allreduce, grouped_allreduce
from tfring.tensorflow import _labels


def var_key(var):
    """Hashable identity of a variable; a Keras 3 Variable and the tf.Variable it wraps are one variable.

    Args:
        var: a tf.Variable, keras.Variable or other object.

    Returns:
        A hashable key.
    """
    inner = getattr(var, "_value", None)
    if isinstance(inner, tf.Variable):
        var = inner
    return var.ref() if isinstance(var, tf.Variable) else id(var)


def _is_variable(v):
    return isinstance(v, tf.Variable) or isinstance(getattr(v, "_value", None), tf.Variable)


def check_groups(who, groups, num_groups):
    """`tfring.common.gradient_groups.check_groups` for TensorFlow variables.

    Args:
        who: the caller's name, for messages.
        groups: None, an int >= 1, or a list of lists of variables.
        num_groups: the deprecated int (0: unset).

    Returns:
        None, an int >= 1, or a list of lists of variables.

    Raises:
        ValueError: the arguments are malformed, or a variable is listed twice.
    """
    return gradient_groups.check_groups(who, groups, num_groups, _is_variable, var_key)


def local_layer_variables(who, local_layers):
    """The trainable variables of local_layers.

    Args:
        who: the caller's name, for messages.
        local_layers: a built Keras layer, a list of them, or None.

    Returns:
        list: their trainable variables.

    Raises:
        ValueError: something is not a Keras layer, or a layer is not built.
    """
    if local_layers is None:
        return []
    import keras
    layer_types = (keras.layers.Layer,) + ((sys.modules["tf_keras"].layers.Layer,) if "tf_keras" in sys.modules
                                           else ())
    if isinstance(local_layers, layer_types):
        local_layers = [local_layers]
    local_layers = list(local_layers)
    for layer in local_layers:
        if not isinstance(layer, layer_types):
            raise ValueError("%s: local_layers must be Keras layers; got %r" % (who, layer))
        if not layer.built:
            raise ValueError("%s: local layer %r is not built yet, so it has no variables to keep local; build "
                             "the model first" % (who, layer.name))
    return [v for layer in local_layers for v in layer.trainable_weights]


class GradientReducer:
    """Reduces gradients over the ranks of process_set, except those of registered local variables, which stay
    local (divided by the process set's size when scale_local_gradients, as in Horovod).

    Args:
        who: the owner's name, for messages.
        op, compression, sparse_as_dense, gradient_predivide_factor: as for `DistributedGradientTape`.
        groups, num_groups, process_set, device_dense, device_sparse, scale_local_gradients: the same.

    Raises:
        ValueError: gradient_predivide_factor with an op other than Average, or malformed groups.
    """

    def __init__(self, who, op=Average, compression=Compression.none, sparse_as_dense=False,
                 gradient_predivide_factor=1.0, groups=None, num_groups=0, process_set=None, device_dense="",
                 device_sparse="", scale_local_gradients=True):
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("%s: gradient_predivide_factor=%r needs op=Average" % (who, gradient_predivide_factor))
        self.who = who
        self.op, self.compression, self.sparse_as_dense = op, compression, sparse_as_dense
        self.predivide = gradient_predivide_factor
        self.groups = check_groups(who, groups, num_groups)
        self.process_set = process_set
        self.devices = (device_dense, device_sparse)
        self.scale_local_gradients = scale_local_gradients
        self.local = {}  # var_key -> variable (kept alive so an id() key stays valid)

    def register_local(self, var):
        """Keeps var's gradient local.

        Args:
            var: a variable.
        """
        self.local[var_key(var)] = var

    def is_local(self, var):
        """Whether var was registered as local.

        Args:
            var: a variable.

        Returns:
            bool
        """
        return var_key(var) in self.local

    def _split(self, present, keys):
        """Index lists, one per grouped allreduce."""
        return gradient_groups.split_groups(self.who, self.groups, present, keys, var_key)

    def reduce(self, grads, variables=None):
        """Reduces the gradients. On a rank outside the process set, or in a set of one rank, they come back
        unchanged (as in Horovod).

        Args:
            grads: a flat list of gradients (None stays None).
            variables: the matching variables, or None (then none is local, and list groups cannot apply).

        Returns:
            list: the reduced gradients, in order.

        Raises:
            ValueError: groups given as variable lists but no variables.
        """
        grads = list(grads)
        if not communicates(self.process_set):
            return grads
        keys = [var_key(v) for v in variables] if variables is not None else None
        local = set(i for i in range(len(grads)) if keys is not None and keys[i] in self.local)
        present = [i for i, g in enumerate(grads) if g is not None and i not in local]
        pre, post = (1.0 / self.predivide, self.predivide) if self.op == Average else (1.0, 1.0)
        out = list(grads)
        kw = dict(op=self.op, compression=self.compression, prescale_factor=pre, postscale_factor=post,
                  process_set=self.process_set, device_dense=self.devices[0], device_sparse=self.devices[1])
        dense = lambda g: (tf.convert_to_tensor(g) if self.sparse_as_dense  # noqa: E731
                           and isinstance(g, tf.IndexedSlices) else g)
        graph = self.groups is None and not tf.executing_eagerly()
        if graph and overlap_gradients():
            # In a graph, one op per gradient (as Horovod): each starts as soon as backprop produces its
            # gradient, overlapping communication with the rest of backprop; the core still fuses those that
            # are ready in the same cycle. Only where overlap pays (tfring.common.overlap): with one core per
            # rank the grouped op below, after backprop, is faster.
            for i in present:
                with _labels.given([_labels.of_variable(variables[i])] if variables is not None else None):
                    out[i] = allreduce(dense(grads[i]), **kw)
        else:
            # Eagerly, one grouped op runs every allreduce at once (separate eager ops would run one by one); in a
            # graph where overlap does not pay, it runs after backprop without competing with it.
            for idx in self._split(present, keys):
                labels = [_labels.of_variable(variables[i]) for i in idx] if variables is not None else None
                with _labels.given(labels):
                    reduced = grouped_allreduce([dense(grads[i]) for i in idx], **kw)
                for i, r in zip(idx, reduced):
                    out[i] = r
        n = process_set_size(self.process_set)
        if self.scale_local_gradients:
            # Horovod divides local gradients by the set's size too (horovod pull 3695), so a local variable
            # moves at the same scale as the averaged global ones.
            for i in local:
                g = grads[i]
                if isinstance(g, tf.IndexedSlices):
                    out[i] = tf.IndexedSlices(g.values / tf.cast(n, g.values.dtype), g.indices, g.dense_shape)
                elif g is not None:
                    out[i] = g / tf.cast(n, g.dtype)
        return out


class _DistributedGradientTape(tf.GradientTape):
    def __init__(self, tape, reducer):
        # Adopt the user's tape state: it already recorded the forward pass.
        self.__dict__ = tape.__dict__
        self._tfring_reducer = reducer

    def register_local_source(self, source):
        """Its gradient is not reduced over ranks (only scaled, see scale_local_gradients)."""
        self._tfring_reducer.register_local(source)

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False, **kwargs):
        grads = super().gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat = self._tfring_reducer.reduce(tf.nest.flatten(grads), flat_sources)
        return tf.nest.pack_sequence_as(grads, flat)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None):
        """([(source, grad) of local sources], [(source, grad) of the others]), gradients as gradient() gives."""
        pairs = list(zip(sources, self.gradient(target, sources, output_gradients)))
        local = [p for p in pairs if self._tfring_reducer.is_local(p[0])]
        return local, [p for p in pairs if not self._tfring_reducer.is_local(p[0])]


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=None, scale_local_gradients=True):
    """Wraps a tf.GradientTape so that `gradient()` returns gradients reduced over the ranks of `process_set`.

    Inside a tf.function every gradient gets its own allreduce, started as soon as backprop produces it;
    eagerly one grouped allreduce runs them all. On a rank outside the set, or in a set of one rank, the
    gradients come back unchanged (as in Horovod). The returned tape also has `register_local_source(var)`
    (var's gradient stays local, divided by the set's size with `scale_local_gradients`) and
    `get_local_and_global_gradients(target, sources)`.

    Args:
        gradtape: the tf.GradientTape that recorded the forward pass.
        device_dense, device_sparse: device for the collectives (GPU builds) / for `tf.IndexedSlices`.
        compression: `Compression.none`, `.fp16` or `.bf16`.
        sparse_as_dense: turn `tf.IndexedSlices` gradients into dense ones before reducing them.
        op: `Average` (default), `Sum` or `Adasum`.
        gradient_predivide_factor: with Average, divide by this before the sum and by size/this after.
        num_groups: deprecated spelling of an int `groups`.
        groups: an int (that many contiguous groups, one grouped allreduce each) or lists of variables (one
            grouped allreduce per list, every other gradient alone).
        process_set: the `tfring.ProcessSet` to reduce over (default: all ranks).
        scale_local_gradients: divide local gradients by the set's size (Horovod's default).

    Returns:
        A tf.GradientTape (the same recorded state) whose `gradient()` reduces.

    Raises:
        ValueError: gradient_predivide_factor with an op other than Average, or malformed groups.
    """
    reducer = GradientReducer("tfring.DistributedGradientTape", op, compression, sparse_as_dense,
                              gradient_predivide_factor, groups, num_groups, process_set, device_dense,
                              device_sparse, scale_local_gradients)
    return _DistributedGradientTape(gradtape, reducer)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                                   num_groups=0, groups=None, process_set=None, local_layers=None,
                                   scale_local_gradients=True):
    """`DistributedGradientTape` whose gradients of `local_layers`' trainable variables are not reduced.

    Args:
        gradtape, device_dense, device_sparse, compression, sparse_as_dense: as for `DistributedGradientTape`.
        op, gradient_predivide_factor, num_groups, groups, process_set, scale_local_gradients: the same.
        local_layers: a built Keras layer, or a list of them, whose variables stay local.

    Returns:
        A tf.GradientTape whose `gradient()` reduces the other gradients.

    Raises:
        ValueError: a local layer is not a built Keras layer, or other arguments are malformed.
    """
    local_vars = local_layer_variables("tfring.PartialDistributedGradientTape", local_layers)
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for v in local_vars:
        tape.register_local_source(v)
    return tape
