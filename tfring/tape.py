"""DistributedGradientTape: a GradientTape whose gradient() returns gradients averaged over ranks."""
import tensorflow as tf

from tfring.compression import Compression
from tfring.ops import Average, grouped_allreduce


def _densify(grad):
    return tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad


class _DistributedGradientTape(tf.GradientTape):
    def __init__(self, tape, op, compression, sparse_as_dense, gradient_predivide_factor):
        # Adopt the user's tape state: it already recorded the forward pass.
        self.__dict__ = tape.__dict__
        self._tfring_op = op
        self._tfring_compression = compression
        self._tfring_sparse_as_dense = sparse_as_dense
        self._tfring_predivide = gradient_predivide_factor

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = super().gradient(target, sources, output_gradients, **kwargs)
        return reduce_gradients(grads, self._tfring_op, self._tfring_compression, self._tfring_sparse_as_dense,
                                self._tfring_predivide)


def reduce_gradients(grads, op=Average, compression=Compression.none, sparse_as_dense=False,
                     gradient_predivide_factor=1.0):
    """Allreduces a (possibly nested) structure of gradients in one grouped, fused collective. None stays None."""
    flat = tf.nest.flatten(grads, expand_composites=False)
    present = [i for i, g in enumerate(flat) if g is not None]
    values = [_densify(flat[i]) if sparse_as_dense else flat[i] for i in present]
    pre, post = 1.0, 1.0
    if gradient_predivide_factor != 1.0 and op == Average:
        from tfring.basics import size
        pre, post = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    reduced = grouped_allreduce(values, op=op, compression=compression, prescale_factor=pre,
                                postscale_factor=post) if values else []
    for i, r in zip(present, reduced):
        flat[i] = r
    return tf.nest.pack_sequence_as(grads, flat, expand_composites=False)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=None):
    """Wraps a tf.GradientTape so that tape.gradient() averages gradients over all ranks."""
    if process_set not in (None, 0):
        raise NotImplementedError("tfring.DistributedGradientTape: process_set=%r is not supported" % (process_set,))
    return _DistributedGradientTape(gradtape, op, compression, sparse_as_dense, gradient_predivide_factor)
