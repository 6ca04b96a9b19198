"""DistributedGradientTape / PartialDistributedGradientTape, and GradientReducer: what they and both Keras
DistributedOptimizers do to a list of gradients (grouping, worker-local variables, process sets)."""
import sys

import tensorflow as tf

from tfring.tensorflow.compression import Compression
from tfring.common import gradient_reducer, powersgd
from tfring.common.overlap import overlap_gradients
from tfring.common.reduce_ops import Average, Sum
from tfring.tensorflow._reduce import allreduce, grouped_allreduce
from tfring.tensorflow import _labels, _powersgd


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


def layer_types():
    """The Keras layer base classes in use: Keras 3's, and tf_keras' once something imported it."""
    import keras
    return (keras.layers.Layer,) + ((sys.modules["tf_keras"].layers.Layer,) if "tf_keras" in sys.modules else ())


class GradientReducer(gradient_reducer.GradientReducer):
    """`tfring.common.gradient_reducer.GradientReducer` over TensorFlow's ops: `tf.IndexedSlices` gradients
    (densified with sparse_as_dense), and in a graph one op per gradient where overlap pays.

    Args:
        who, op, compression, sparse_as_dense, gradient_predivide_factor: as for `DistributedGradientTape`.
        groups, num_groups, process_set, device_dense, device_sparse, scale_local_gradients: the same.
    """

    var_key = staticmethod(var_key)
    is_variable = staticmethod(_is_variable)

    def __init__(self, who, op=Average, compression=Compression.none, *args, **kwargs):
        low_rank = powersgd.settings(compression)
        super().__init__(who, op, Compression.none if low_rank else compression, *args, **kwargs)
        self.powersgd = None
        if low_rank is not None:
            if self.groups or op not in (Average, Sum):
                raise ValueError("%s: compression=%r does not combine with %s" % (
                    who, low_rank, "groups=%r" % (self.groups,) if self.groups else "op=%r" % (op,)))
            self.powersgd = _powersgd.tape_state(low_rank)

    def _reduce_present(self, grads, present, keys, variables, kwargs):
        kw = dict(kwargs, device_dense=self.devices[0], device_sparse=self.devices[1])
        dense = lambda g: (tf.convert_to_tensor(g) if self.sparse_as_dense  # noqa: E731
                           and isinstance(g, tf.IndexedSlices) else g)
        out = {}
        if self.powersgd is not None:
            keys = keys or list(range(len(grads)))
            reduced = self.powersgd.reduce([tf.convert_to_tensor(grads[i]) for i in present],
                                           [keys[i] for i in present],
                                           lambda tensors, name: grouped_allreduce(tensors, name=name, **kw))
            return dict(zip(present, reduced))
        if self.groups is None and not tf.executing_eagerly() and overlap_gradients():
            # In a graph, one op per gradient (as Horovod): each starts as soon as backprop produces its
            # gradient, overlapping communication with the rest of backprop; the core still fuses those that
            # are ready in the same cycle. Only where overlap pays (tfring.common.overlap): with one core per
            # rank the grouped op below, after backprop, is faster.
            for i in present:
                with _labels.given([_labels.of_variable(variables[i])] if variables is not None else None):
                    out[i] = allreduce(dense(grads[i]), **kw)
            return out
        # Eagerly, one grouped op runs every allreduce at once (separate eager ops would run one by one); in a
        # graph where overlap does not pay, it runs after backprop without competing with it.
        for idx in self.split(present, keys):
            labels = [_labels.of_variable(variables[i]) for i in idx] if variables is not None else None
            with _labels.given(labels):
                reduced = grouped_allreduce([dense(grads[i]) for i in idx], **kw)
            out.update(zip(idx, reduced))
        return out

    def _scaled(self, grad, n):
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(grad.values / tf.cast(n, grad.values.dtype), grad.indices, grad.dense_shape)
        return grad / tf.cast(n, grad.dtype)


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
        compression: `Compression.none`, `.fp16` or `.bf16`, or `Compression.powersgd(rank, warmup_steps,
            min_size)`: a rank-r approximation with error feedback, its state kept per settings and source variable
            across the loop's tapes (docs/compression.md); not with groups or Adasum.
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
    local_vars = gradient_reducer.local_layer_variables("tfring.PartialDistributedGradientTape", local_layers,
                                                        layer_types())
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for v in local_vars:
        tape.register_local_source(v)
    return tape
