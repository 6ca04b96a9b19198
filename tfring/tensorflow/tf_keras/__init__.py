"""The tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1) wrappers, in one place of their own: the DistributedOptimizer
(with backward_passes_per_step's aggregation) and SyncBatchNormalization. `tfring.keras.DistributedOptimizer`
and `tfring.tensorflow.DistributedOptimizer` hand tf_keras optimizers here; Keras 3 is tfring.keras's."""
import sys


def is_tf_keras_optimizer(optimizer):
    """Whether optimizer is a tf_keras one (also a legacy OptimizerV2). An instance of one means tf_keras is
    imported already, so it is never imported here.

    Args:
        optimizer: any object.

    Returns:
        bool
    """
    if "tf_keras" not in sys.modules:
        return False
    from tfring.tensorflow.tf_keras.optimizer import optimizer_types
    return isinstance(optimizer, optimizer_types())
