"""SyncBatchNormalization: batch normalization whose training-mode statistics are those of the global batch
(every rank of a process set). Keras 3 layer here; with TF_USE_LEGACY_KERAS=1 the name is the tf_keras layer
of sync_batch_norm_tf_keras.py. Inference mode uses the moving statistics, exactly like BatchNormalization."""
import os

import tensorflow as tf

from tfring.common.process_sets import process_set_size
from tfring.tensorflow._sync_bn_moments import check_options, global_moments


def _legacy_keras():
    return os.environ.get("TF_USE_LEGACY_KERAS", "0").lower() in ("1", "true")


if _legacy_keras():
    from tfring.tensorflow.sync_batch_norm_tf_keras import SyncBatchNormalization  # noqa: F401,E402
else:
    import keras

    @keras.saving.register_keras_serializable(package="tfring")
    class SyncBatchNormalization(keras.layers.BatchNormalization):
        """keras.layers.BatchNormalization whose training-mode mean and variance are computed over the
        global batch of all ranks in `process_set` (default: all ranks).

        Every rank in the set must call the layer in training mode together. Ranks are weighted by their row
        counts (batch sizes may differ, a rank may have none). Inference uses the moving statistics, as
        BatchNormalization. `process_set` is not saved with the layer's config.

        Args:
            fused: must be False (Horovod's argument; the fused kernel computes local statistics).
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
            weights = None
            if mask is not None:
                weights = tf.expand_dims(tf.cast(mask, inputs.dtype), -1)  # Keras 3: mask is inputs.shape[:-1]
            return global_moments(inputs, self._reduction_axes, weights, process_set=self.process_set)
