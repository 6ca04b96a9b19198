"""SyncBatchNormalization for Keras 3 on every backend (also `tfring.SyncBatchNormalization`, Horovod's
`horovod.tensorflow.SyncBatchNormalization`): training-mode statistics of the global batch of every rank in a
process set, differentiable; inference uses the moving statistics, exactly like BatchNormalization. With
TF_USE_LEGACY_KERAS=1 the name is tf_keras' layer (tfring.tensorflow.tf_keras.sync_batch_norm)."""
import keras
from keras import ops

from tfring.common.process_sets import process_set_size
from tfring.common.sync_batch_norm import check_options
from tfring.keras._backend import glue, legacy_keras


def _gathered(stats, process_set):
    """Every rank's stats (allgather), with the gradient of the sum of all ranks' losses: the bindings' allgather
    gradient is Horovod's average over the ranks, so it is scaled by the set's size (the value is unchanged)."""
    kwargs = {} if process_set is None else {"process_set": process_set}
    gathered = glue().binding.allgather(stats, **kwargs)
    scaled = gathered * float(process_set_size(process_set))
    return ops.stop_gradient(gathered) + (scaled - ops.stop_gradient(scaled))


@keras.saving.register_keras_serializable(package="tfring")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization whose training-mode mean and variance are computed over the global batch
    of all ranks in `process_set` (default: all ranks).

    Every rank in the set must call the layer in training mode together. Ranks are weighted by their element
    counts (batch sizes may differ, a rank may have none). One allgather per call: each rank's (count, sum,
    squared deviations from its own mean), combined with Chan et al.'s parallel formula (no E[x^2] - E[x]^2
    cancellation). Gradients flow back to every rank's inputs as the gradient of the sum of all ranks' losses
    (as Horovod's Sum allreduce of the statistics), so averaging gradients over ranks (DistributedOptimizer)
    trains like one process on the global batch. `process_set` is not saved with the layer's config.

    Args:
        fused: must be False (Horovod's argument).
        process_set: the `tfring.ProcessSet` to synchronize over (default: all ranks).
        synchronized: must be False (tf.distribute's own synchronization).
        **kwargs: keras.layers.BatchNormalization's arguments (axis, momentum, epsilon, ...).

    Raises:
        ValueError: fused or synchronized is set.
    """

    def __init__(self, fused=False, process_set=None, synchronized=False, **kwargs):
        check_options(fused, synchronized)
        super().__init__(**kwargs)
        self.process_set = process_set

    def _moments(self, inputs, mask):
        if process_set_size(self.process_set) == 1:
            return super()._moments(inputs, mask)  # nothing to synchronize: exactly BatchNormalization
        axes = self._reduction_axes
        low = keras.backend.standardize_dtype(inputs.dtype) in ("float16", "bfloat16")
        x = ops.cast(inputs, "float32") if low else inputs  # statistics in float32, as BatchNormalization
        w = ops.ones_like(x) if mask is None else ops.broadcast_to(ops.expand_dims(ops.cast(mask, x.dtype), -1),
                                                                    ops.shape(x))
        if mask is not None:  # masked-out values (padding, maybe inf/nan) must not reach the sums, as Keras' own
            x = ops.where(w > 0, x, ops.zeros_like(x))
        count = ops.sum(w, axes)
        total = ops.sum(w * x, axes)
        shape = [1 if i in axes else d for i, d in enumerate(ops.shape(x))]
        local_mean = ops.reshape(total / ops.maximum(count, 1.0), shape)
        m2 = ops.sum(w * ops.square(x - local_mean), axes)
        stats = _gathered(ops.expand_dims(ops.stack([count, total, m2]), 0), self.process_set)  # [ranks, 3, ...]
        counts, totals, m2s = stats[:, 0], stats[:, 1], stats[:, 2]
        n = ops.maximum(ops.sum(counts, 0), 1.0)
        mean = ops.sum(totals, 0) / n
        between = ops.sum(counts * ops.square(totals / ops.maximum(counts, 1.0) - mean), 0)
        variance = (ops.sum(m2s, 0) + between) / n
        return ops.cast(mean, inputs.dtype), ops.cast(variance, inputs.dtype)



if legacy_keras():  # tf_keras (Keras 2) has its own layer under the same name
    from tfring.tensorflow.tf_keras.sync_batch_norm import SyncBatchNormalization  # noqa: F401,F811,E402
