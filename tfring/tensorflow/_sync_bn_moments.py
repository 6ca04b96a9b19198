"""The global batch's moments for SyncBatchNormalization (Keras 3 and tf_keras layers alike): every rank's
statistics combined over a process set, differentiable."""
import tensorflow as tf

from tfring.common.process_sets import process_set_rank
from tfring.tensorflow.ops import Sum, allgather, allreduce


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


def check_options(fused, synchronized):
    """Shared by both Keras versions: fused kernels compute local statistics, `synchronized` is
    tf.distribute's own cross-replica mode.

    Args:
        fused: must be False.
        synchronized: must be False.

    Raises:
        ValueError: either is set.
    """
    if fused in (True, None):
        raise ValueError("SyncBatchNormalization: fused=%r is not supported (the fused kernel computes local "
                         "statistics); use fused=False" % (fused,))
    if synchronized:
        raise ValueError("SyncBatchNormalization: synchronized=True is tf.distribute's synchronization; tfring "
                         "synchronizes over process_set already, leave synchronized=False")
