"""SyncBatchNormalization for tf_keras (TF_USE_LEGACY_KERAS=1); tfring.SyncBatchNormalization is this class then."""
import tensorflow as tf
import tf_keras

from tfring.common.process_sets import process_set_size
from tfring.tensorflow._sync_bn_moments import check_options, global_moments


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
