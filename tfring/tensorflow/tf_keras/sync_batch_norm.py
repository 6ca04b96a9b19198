"""SyncBatchNormalization for tf_keras (TF_USE_LEGACY_KERAS=1); tfring.SyncBatchNormalization is this class then.
Keras 3's, on every backend, is tfring.keras.sync_batch_norm's."""
import tensorflow as tf
import tf_keras

from tfring.common.process_sets import process_set_rank, process_set_size
from tfring.common.sync_batch_norm import check_options
from tfring.common.reduce_ops import Sum
from tfring.tensorflow.mpi_ops import allgather, allreduce


def global_moments(x, axes, weights=None, keepdims=False, process_set=None):
    """Mean and biased variance of x over `axes`, taken over the concatenation of every rank's x.

    Each rank contributes (count, sum, sum of squared deviations from its own mean); combining them with
    Chan et al.'s parallel formula weights ranks by their element counts (ranks may have different batch
    sizes, or none) and avoids the cancellation of E[x^2] - E[x]^2. The statistics are allgathered (a few
    numbers per channel and rank); gradients flow back to every rank's inputs (see _exchange).

    Args:
        x: this rank's batch (may be empty).
        axes: the axes to reduce.
        weights: optional weights broadcastable to x (a mask), else every element counts once.
        keepdims: keep the reduced axes (size 1).
        process_set: the `tfring.ProcessSet` whose ranks' batches form the global batch (default: all).

    Returns:
        tuple: (mean, variance).
    """
    if weights is None:
        total = tf.reduce_sum(x, axes, keepdims=True)
        per_channel = tf.reduce_prod(tf.gather(tf.shape(x), axes))
        count = tf.ones_like(total) * tf.cast(per_channel, x.dtype)
        local_mean = tf.math.divide_no_nan(total, count)
        m2 = tf.reduce_sum(tf.square(x - local_mean), axes, keepdims=True)
    else:
        w = tf.broadcast_to(tf.cast(weights, x.dtype), tf.shape(x))
        count = tf.reduce_sum(w, axes, keepdims=True)
        total = tf.reduce_sum(w * x, axes, keepdims=True)
        local_mean = tf.math.divide_no_nan(total, count)
        m2 = tf.reduce_sum(w * tf.square(x - local_mean), axes, keepdims=True)
    gathered = _exchange(tf.stack([count, total, m2]), process_set)  # [ranks, 3, ...]
    counts, totals, m2s = gathered[:, 0], gathered[:, 1], gathered[:, 2]
    n = tf.reduce_sum(counts, 0)
    mean = tf.math.divide_no_nan(tf.reduce_sum(totals, 0), n)
    between = tf.reduce_sum(counts * tf.square(tf.math.divide_no_nan(totals, counts) - mean), 0)
    variance = tf.math.divide_no_nan(tf.reduce_sum(m2s, 0) + between, n)
    if not keepdims:
        mean, variance = tf.squeeze(mean, axes), tf.squeeze(variance, axes)
    return mean, variance


def _exchange(stats, process_set):
    """Allgathers every rank's stats. Its gradient is that of the sum of all ranks' losses, as with Horovod's
    Sum allreduce of the statistics: this rank's stats receive the upstream gradients summed over ranks. Then
    averaging gradients over ranks (DistributedOptimizer) trains like one process on the global batch.
    Explicit here rather than inherited from the allgather gradient, whose convention (sum or average over
    ranks) is a separate API choice."""
    @tf.custom_gradient
    def run(s):
        def grad(upstream):
            return allreduce(upstream, op=Sum, process_set=process_set)[process_set_rank(process_set)]
        return allgather(s[None], process_set=process_set), grad
    return run(stats)



@tf_keras.utils.register_keras_serializable(package="tfring")
class SyncBatchNormalization(tf_keras.layers.BatchNormalization):
    """tf_keras.layers.BatchNormalization (non-fused) whose training-mode mean and variance are computed over
    the global batch of all ranks in `process_set` (default: all ranks).

    Args:
        fused: must be False.
        process_set: the `tfring.ProcessSet` to synchronize over (default: all ranks).
        synchronized: must be False (tf.distribute's own synchronization).
        **kwargs: tf_keras.layers.BatchNormalization's arguments (virtual_batch_size is not supported).

    Raises:
        ValueError: fused, synchronized or virtual_batch_size is set.
    """

    def __init__(self, fused=False, process_set=None, synchronized=False, **kwargs):
        check_options(fused, synchronized)
        if kwargs.get("virtual_batch_size") is not None:
            raise ValueError("SyncBatchNormalization: virtual_batch_size=%r is not supported (ghost batches are "
                             "per rank by definition)" % (kwargs["virtual_batch_size"],))
        super().__init__(fused=False, **kwargs)
        self.process_set = process_set

    def _calculate_mean_and_var(self, inputs, reduction_axes, keep_dims, mask=None):
        # The statistics proper; tf_keras's _moments around it keeps its zero-size-batch handling.
        if process_set_size(self.process_set) == 1:
            return super()._calculate_mean_and_var(inputs, reduction_axes, keep_dims, mask=mask)
        weights = None
        if mask is not None:
            weights = tf.expand_dims(tf.cast(mask, inputs.dtype), -1)  # as tf_keras's weighted moments do
        return global_moments(inputs, reduction_axes, weights, keepdims=keep_dims, process_set=self.process_set)
